/**
 * Outputs of gpudev kernels rendered untrusted (the server's
 * `c.GPUDevApp.untrusted_kernel_outputs`, on by default in shared mode).
 *
 * JupyterLab trusts what a cell outputs when the user ran it: `CodeCell.execute`
 * marks the cell trusted, so its HTML runs scripts and its JavaScript runs.
 * A kernel in a dev container runs whatever its image and packages put there,
 * so `OutputTrustGuard` marks each cell a gpudev kernel runs untrusted again,
 * before its first output arrives (outputs come in later tasks): JupyterLab
 * then renders only safe MIME types (text, images, Markdown and HTML
 * sanitised, LaTeX, JSON), never `application/javascript`. The cell's
 * `trusted` metadata goes too, so a notebook saved with such outputs is not
 * signed by the server and opens untrusted.
 *
 * Widgets (`application/vnd.jupyter.widget-view+json`) are not a safe MIME
 * type in JupyterLab; unless the server says `untrusted-no-widgets`, the
 * guard lets the rendermime of its notebook or console choose them for the
 * widgets the kernel opened in this session (their `comm_open` seen), never
 * for widget state saved in a notebook file.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { ICellModel } from '@jupyterlab/cells';
import type { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import type { KernelMessage } from '@jupyterlab/services';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import type { IDisposable } from '@lumino/disposable';

/**
 * How outputs of gpudev kernels render, as the server says in its page
 * config (`GPUDevApp.kernel_outputs`): as JupyterLab renders any output
 * (`trusted`), untrusted with the kernel's widgets (`untrusted`), or
 * untrusted without them (`untrusted-no-widgets`).
 */
export type KernelOutputs = 'trusted' | 'untrusted' | 'untrusted-no-widgets';

/** The MIME type of a widget's view in an output. */
export const WIDGET_VIEW_MIMETYPE = 'application/vnd.jupyter.widget-view+json';

/** The comm target of ipywidgets' models. */
export const WIDGET_COMM_TARGET = 'jupyter.widget';

/** The name every gpudev kernelspec starts with (kernels/kernelspecs.py). */
export const GPUDEV_KERNEL_PREFIX = 'gpudev-';

/** The kernel provisioners of gpudev (pyproject.toml's entry points). */
export const GPUDEV_PROVISIONERS: readonly string[] = [
  'gpudev',
  'gpudev-service'
];

/**
 * The page config value read as a `KernelOutputs`: absent (a server without
 * the gpudev extension) is `trusted`, JupyterLab's own rules; a value this
 * version does not know is the strictest.
 */
export function parseKernelOutputs(
  value: string | null | undefined
): KernelOutputs {
  if (!value) {
    return 'trusted';
  }
  if (
    value === 'trusted' ||
    value === 'untrusted' ||
    value === 'untrusted-no-widgets'
  ) {
    return value;
  }
  return 'untrusted-no-widgets';
}

/** What `isGPUDevKernel` reads of a kernelspec (its JSON `metadata`). */
export interface IKernelSpecLike {
  metadata?: Readonly<Record<string, unknown>>;
}

/**
 * Whether the kernel named `name`, of kernelspec `spec` (when the server
 * still lists it), runs in a dev container: a gpudev kernelspec's name, or a
 * kernelspec launched by a gpudev provisioner or describing a gpudev kernel.
 */
export function isGPUDevKernel(
  name: string,
  spec?: IKernelSpecLike | null
): boolean {
  if (name.startsWith(GPUDEV_KERNEL_PREFIX)) {
    return true;
  }
  const metadata = spec?.metadata;
  if (!metadata) {
    return false;
  }
  const provisioner = metadata['kernel_provisioner'] as
    { provisioner_name?: unknown } | null | undefined;
  const provisionerName = provisioner?.provisioner_name;
  if (
    typeof provisionerName === 'string' &&
    GPUDEV_PROVISIONERS.includes(provisionerName)
  ) {
    return true;
  }
  const gpudev = metadata['gpudev'];
  return typeof gpudev === 'object' && gpudev !== null;
}

/**
 * The model id of a widget view output (`undefined` if `bundle` has none).
 */
export function widgetModelId(
  bundle: ReadonlyPartialJSONObject
): string | undefined {
  const view = bundle[WIDGET_VIEW_MIMETYPE] as
    { model_id?: unknown } | null | undefined;
  const id = view?.model_id;
  return typeof id === 'string' ? id : undefined;
}

/** What an `OutputTrustGuard` watches. */
export namespace OutputTrustGuard {
  export interface IOptions {
    /** The session of the notebook or console. */
    sessionContext: ISessionContext;
    /** The notebook's or console's own rendermime (a clone of Lab's). */
    rendermime: IRenderMimeRegistry;
    /** What the server says. */
    policy: KernelOutputs;
    /**
     * `console`: a console cell is untrusted again whenever it is marked
     * trusted (a console has no "Trust" command; outputs of other clients
     * of the kernel come in cells marked trusted). `notebook`: only when it
     * runs, so "Trust Notebook" keeps working for what the user trusts.
     */
    kind: 'notebook' | 'console';
  }
}

/**
 * Keeps the cells of one notebook or console untrusted when its kernel is a
 * gpudev kernel (see the module's comment). `watch` each cell model.
 */
export class OutputTrustGuard implements IDisposable {
  constructor(options: OutputTrustGuard.IOptions) {
    this._sessionContext = options.sessionContext;
    this._rendermime = options.rendermime;
    this._policy = options.policy;
    this._kind = options.kind;
    if (this._policy === 'untrusted') {
      this._sessionContext.iopubMessage.connect(this._onIOPub);
      this._sessionContext.kernelChanged.connect(this._onKernelChanged);
      // The rendermime is the notebook's (or console's) own: this choice
      // lasts as long as it, and is JupyterLab's own once the guard is
      // disposed or the kernel is not a gpudev one.
      const registry = this._rendermime;
      const original = registry.preferredMimeType.bind(registry);
      registry.preferredMimeType = (bundle, safe) =>
        safe !== 'any' && this._isLiveWidget(bundle)
          ? WIDGET_VIEW_MIMETYPE
          : original(bundle, safe);
    }
  }

  /** Whether the session's kernel is a gpudev kernel whose outputs are untrusted. */
  get active(): boolean {
    if (this._policy === 'trusted' || this._isDisposed) {
      return false;
    }
    const kernel = this._sessionContext.session?.kernel;
    if (!kernel) {
      return false;
    }
    const specs = this._sessionContext.specsManager.specs;
    return isGPUDevKernel(kernel.name, specs?.kernelspecs[kernel.name]);
  }

  /** Keep `model` untrusted when it runs on a gpudev kernel. */
  watch(model: ICellModel): void {
    if (this._isDisposed || model.type !== 'code' || this._watched.has(model)) {
      return;
    }
    this._watched.add(model);
    model.stateChanged.connect(this._onCellState);
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._sessionContext.iopubMessage.disconnect(this._onIOPub);
    this._sessionContext.kernelChanged.disconnect(this._onKernelChanged);
    this._widgets.clear();
  }

  private _onCellState = (
    model: ICellModel,
    change: { name: string; newValue: unknown }
  ): void => {
    const runs =
      change.name === 'executionState' && change.newValue === 'running';
    const trusted =
      this._kind === 'console' &&
      change.name === 'trusted' &&
      change.newValue === true;
    if ((runs || trusted) && this.active) {
      // After the rest of the synchronous code that started the execution
      // (CodeCell.execute marks the cell trusted after it marks it running),
      // and before any output: outputs arrive in later tasks.
      queueMicrotask(() => {
        untrust(model);
      });
    }
  };

  private _onIOPub = (_: unknown, msg: KernelMessage.IMessage): void => {
    if (msg.channel !== 'iopub' || msg.header.msg_type !== 'comm_open') {
      return;
    }
    const content = (msg as KernelMessage.ICommOpenMsg<'iopub'>).content;
    if (content.target_name === WIDGET_COMM_TARGET) {
      this._widgets.add(content.comm_id);
    }
  };

  private _onKernelChanged = (): void => {
    this._widgets.clear();
  };

  /** Whether `bundle` is the view of a widget the gpudev kernel opened. */
  private _isLiveWidget(bundle: ReadonlyPartialJSONObject): boolean {
    const id = widgetModelId(bundle);
    return (
      id !== undefined &&
      this._widgets.has(id) &&
      this._rendermime.mimeTypes.includes(WIDGET_VIEW_MIMETYPE) &&
      this.active
    );
  }

  private _sessionContext: ISessionContext;
  private _rendermime: IRenderMimeRegistry;
  private _policy: KernelOutputs;
  private _kind: 'notebook' | 'console';
  private _watched = new WeakSet<ICellModel>();
  private _widgets = new Set<string>();
  private _isDisposed = false;
}

/**
 * Mark `model` untrusted: its outputs re-render untrusted, new ones come
 * untrusted, and its `trusted` metadata is false (the server signs a saved
 * notebook only if every cell with outputs says trusted).
 */
export function untrust(model: ICellModel): void {
  if (model.isDisposed) {
    return;
  }
  model.trusted = false;
  if (model.getMetadata('trusted') !== false) {
    model.setMetadata('trusted', false);
  }
}
