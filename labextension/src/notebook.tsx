/**
 * The notebook toolbar item of a gpudev kernel: the dev container and GPUs
 * the notebook's kernel runs with, and a "Release GPU" button.
 *
 * This file holds the plugin, the call of `GET /gpudev/api/kernels/ID` with
 * the type guard of its answer, and the state of one notebook's item; the
 * item itself is drawn by `widgets/KernelBadge.tsx`.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import type { ISessionContext } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel, ServerConnection } from '@jupyterlab/services';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { Signal } from '@lumino/signaling';
import type { ISignal } from '@lumino/signaling';

import {
  fetchHost,
  GPUDevAPIError,
  INVALID_RESPONSE,
  NETWORK_ERROR,
  requestAPI,
  stringArray
} from './api';
import { KernelBadge } from './widgets/KernelBadge';
import { TRANSLATION_DOMAIN } from './widgets/HostsPanel';

/** The id of this plugin. */
export const NOTEBOOK_TOOLBAR_PLUGIN_ID = 'jupyter-gpudev:notebook-toolbar';

/**
 * The plugin whose settings hold `showKernelToolbar` (the extension's main
 * plugin, `PLUGIN_ID` of index.ts; repeated here as index.ts imports this
 * file).
 */
const SETTINGS_PLUGIN_ID = 'jupyter-gpudev:plugin';

/** The setting that shows or hides the item in every notebook. */
const SHOW_SETTING = 'showKernelToolbar';

/** The name of the item in the notebook toolbars. */
export const TOOLBAR_ITEM_NAME = 'gpudev';

/**
 * The toolbar item the gpudev one is put before, when the toolbar has it:
 * the spacer, so the item ends the left-hand group. A narrow toolbar moves
 * its last items (the kernel's name and status) into its overflow menu
 * first, and this item after them.
 */
const SPACER_ITEM = 'spacer';

/** Where the item goes in a toolbar without a spacer (after the cell type). */
const FALLBACK_INDEX = 10;

/**
 * A gpudev kernel, as `GET /gpudev/api/kernels/ID` answers it (404 for a
 * kernel that is not one).
 */
export interface IKernelInfo {
  kernel_id: string;
  /** The dev container the kernel runs in. */
  container: string;
  /** The Docker host of the container. */
  host: string;
  environment: string;
  /** The GPUs leased to the container; empty for a CPU-only one. */
  gpu_uuids: string[];
  /**
   * Whether kernels share the container: then it is not stopped with this
   * kernel, but when its last kernel ends (unless it is pinned).
   */
  shared: boolean;
  /** The engine's state of the container, e.g. `running`. */
  state: string;
}

/** True when `value` has the fields the toolbar item relies on. */
export function isKernelInfo(value: unknown): value is IKernelInfo {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return false;
  }
  const record = value as Record<string, unknown>;
  return (
    typeof record.kernel_id === 'string' &&
    typeof record.container === 'string' &&
    record.container !== '' &&
    Array.isArray(record.gpu_uuids)
  );
}

/**
 * `GET /gpudev/api/kernels/ID`: the dev container and GPUs of a gpudev
 * kernel.
 *
 * @throws {GPUDevAPIError} 404 `not_found` for a kernel that is not a gpudev
 *   one (or no longer exists).
 */
export async function fetchKernelInfo(
  kernelId: string,
  settings?: ServerConnection.ISettings
): Promise<IKernelInfo> {
  const body = await requestAPI<unknown>(
    ['kernels', kernelId],
    { method: 'GET' },
    settings
  );
  if (!isKernelInfo(body)) {
    throw new GPUDevAPIError({
      status: 200,
      code: INVALID_RESPONSE,
      message: `The server sent kernel "${kernelId}" in an unexpected shape.`
    });
  }
  const text = (value: unknown): string =>
    typeof value === 'string' ? value : '';
  return {
    kernel_id: body.kernel_id,
    container: body.container,
    host: text(body.host),
    environment: text(body.environment),
    gpu_uuids: stringArray(body.gpu_uuids),
    shared: (body.shared as unknown) === true,
    state: text(body.state)
  };
}

/**
 * The index of each GPU seen so far, by UUID, shared by the items of every
 * notebook: a UUID keeps its index while the host runs, so a host is asked
 * only for GPUs it has not told yet.
 */
export class GPUIndexes {
  constructor(settings: ServerConnection.ISettings) {
    this._settings = settings;
  }

  /** The indexes of `uuids` that are known. */
  known(uuids: readonly string[]): Map<string, number> {
    const found = new Map<string, number>();
    for (const uuid of uuids) {
      const index = this._indexes.get(uuid);
      if (index !== undefined) {
        found.set(uuid, index);
      }
    }
    return found;
  }

  /**
   * Ask `host` for its GPUs (once at a time per host) and remember their
   * indexes. Any failure leaves them unknown: the item then shows short
   * UUIDs.
   */
  async load(host: string): Promise<void> {
    let pending = this._pending.get(host);
    if (!pending) {
      pending = fetchHost(host, this._settings)
        .then(info => {
          for (const gpu of info.gpus.gpus) {
            if (typeof gpu.uuid === 'string' && Number.isInteger(gpu.index)) {
              this._indexes.set(gpu.uuid, gpu.index);
            }
          }
        })
        .catch(() => undefined)
        .finally(() => {
          this._pending.delete(host);
        });
      this._pending.set(host, pending);
    }
    return pending;
  }

  private readonly _settings: ServerConnection.ISettings;
  private readonly _indexes = new Map<string, number>();
  private readonly _pending = new Map<string, Promise<void>>();
}

/** What the toolbar item of one notebook shows. */
export interface IKernelBadgeState {
  /** The notebook's gpudev kernel; `null` hides the item. */
  readonly info: IKernelInfo | null;
  /** The index of each GPU of `info` that is known, by UUID. */
  readonly indexes: ReadonlyMap<string, number>;
  /** Whether a release is under way. */
  readonly releasing: boolean;
}

/**
 * The state of the toolbar item of one notebook. It asks the server about
 * the notebook's kernel when the kernel changes, once the kernel is ready
 * after a start or restart, and when it dies; never on a timer.
 */
export class KernelBadgeModel {
  constructor(options: KernelBadgeModel.IOptions) {
    this._sessionContext = options.sessionContext;
    this._settings = options.settings;
    this._indexes = options.indexes;
    this._enabled = options.enabled ?? true;
    this._sessionContext.kernelChanged.connect(this._onKernelChanged);
    this._sessionContext.statusChanged.connect(this._onStatusChanged);
    if (this._sessionContext.session?.kernel) {
      this._afterStart = true;
      void this.refresh();
    }
  }

  /** The current state; replaced (never mutated) on each change. */
  get state(): IKernelBadgeState {
    return this._state;
  }

  /** Emitted with the new state each time it changes. */
  get stateChanged(): ISignal<this, IKernelBadgeState> {
    return this._stateChanged;
  }

  /** Whether the item is shown at all (the `showKernelToolbar` setting). */
  get enabled(): boolean {
    return this._enabled;
  }

  set enabled(value: boolean) {
    if (value === this._enabled) {
      return;
    }
    this._enabled = value;
    void this.refresh();
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Ask the server about the notebook's current kernel. A kernel that is
   * not a gpudev one (404), no kernel, or a server out of reach hides the
   * item, without a notification.
   */
  async refresh(): Promise<void> {
    const generation = ++this._generation;
    const kernelId = this._sessionContext.session?.kernel?.id;
    if (!this._enabled || !kernelId) {
      this._setState({ info: null, indexes: new Map() });
      return;
    }
    let info: IKernelInfo;
    try {
      info = await fetchKernelInfo(kernelId, this._settings);
    } catch (reason) {
      if (!this._isCurrent(generation)) {
        return;
      }
      const quiet =
        reason instanceof GPUDevAPIError &&
        (reason.status === 404 || reason.code === NETWORK_ERROR);
      if (!quiet) {
        console.warn(
          `jupyter-gpudev: could not tell whether kernel ${kernelId} is a gpudev kernel.`,
          reason
        );
      }
      this._setState({ info: null, indexes: new Map() });
      return;
    }
    if (!this._isCurrent(generation)) {
      return;
    }
    const indexes = this._indexes.known(info.gpu_uuids);
    this._setState({ info, indexes });
    if (indexes.size === info.gpu_uuids.length || !info.host) {
      return;
    }
    await this._indexes.load(info.host);
    if (!this._isCurrent(generation)) {
      return;
    }
    this._setState({ indexes: this._indexes.known(info.gpu_uuids) });
  }

  /**
   * Shut the notebook's kernel down (its session, as the Kernel menu's "Shut
   * Down Kernel" does): the server stops its dev container, which frees its
   * GPUs.
   *
   * @throws whatever the shutdown threw; the item stays shown then.
   */
  async release(): Promise<void> {
    if (this._state.releasing) {
      return;
    }
    this._setState({ releasing: true });
    try {
      await this._sessionContext.shutdown();
    } finally {
      if (!this._isDisposed) {
        this._setState({ releasing: false });
        void this.refresh();
      }
    }
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._generation++;
    this._sessionContext.kernelChanged.disconnect(this._onKernelChanged);
    this._sessionContext.statusChanged.disconnect(this._onStatusChanged);
    Signal.clearData(this);
  }

  /** Whether an answer to refresh `generation` is still wanted. */
  private _isCurrent(generation: number): boolean {
    return generation === this._generation && !this._isDisposed;
  }

  private readonly _onKernelChanged = (): void => {
    this._afterStart = true;
    this._afterRestart = false;
    void this.refresh();
  };

  private readonly _onStatusChanged = (
    _: ISessionContext,
    status: Kernel.Status
  ): void => {
    switch (status) {
      case 'restarting':
      case 'autorestarting':
        this._afterRestart = true;
        break;
      case 'dead':
        // A dead kernel may have left its container: the server says.
        void this.refresh();
        break;
      case 'idle': {
        // Ready: after a restart the kernel may run elsewhere; after a start,
        // ask again if the first answer did not find it.
        const current = this._sessionContext.session?.kernel?.id;
        const missed =
          this._afterStart && this._state.info?.kernel_id !== current;
        if (this._afterRestart || missed) {
          void this.refresh();
        }
        this._afterStart = false;
        this._afterRestart = false;
        break;
      }
      default:
        break;
    }
  };

  private _setState(change: Partial<IKernelBadgeState>): void {
    if (this._isDisposed) {
      return;
    }
    this._state = { ...this._state, ...change };
    this._stateChanged.emit(this._state);
  }

  private readonly _sessionContext: ISessionContext;
  private readonly _settings: ServerConnection.ISettings;
  private readonly _indexes: GPUIndexes;
  private _enabled: boolean;
  private _state: IKernelBadgeState = {
    info: null,
    indexes: new Map(),
    releasing: false
  };
  private readonly _stateChanged = new Signal<this, IKernelBadgeState>(this);
  /** Bumped by each refresh: an answer to an older one is dropped. */
  private _generation = 0;
  private _afterStart = false;
  private _afterRestart = false;
  private _isDisposed = false;
}

export namespace KernelBadgeModel {
  export interface IOptions {
    /** The notebook's session context. */
    sessionContext: ISessionContext;
    /** The GPU indexes shared by every notebook's item. */
    indexes: GPUIndexes;
    /** The server connection. */
    settings: ServerConnection.ISettings;
    /** Whether the item is shown at all (default true). */
    enabled?: boolean;
  }
}

/** The `showKernelToolbar` setting, true unless set to false. */
function readShowSetting(settings: ISettingRegistry.ISettings): boolean {
  return settings.get(SHOW_SETTING).composite !== false;
}

/** Put `badge` in the toolbar of `panel`, before its spacer. */
function insertInToolbar(panel: NotebookPanel, badge: KernelBadge): void {
  const names = [...panel.toolbar.names()];
  const at = names.indexOf(SPACER_ITEM);
  panel.toolbar.insertItem(
    at === -1 ? FALLBACK_INDEX : at,
    TOOLBAR_ITEM_NAME,
    badge
  );
}

/**
 * The notebook toolbar item of gpudev kernels: the dev container and GPUs
 * of the notebook's kernel, and "Release GPU". Hidden for other kernels.
 */
export const notebookToolbarPlugin: JupyterFrontEndPlugin<void> = {
  id: NOTEBOOK_TOOLBAR_PLUGIN_ID,
  description:
    "A notebook toolbar item showing the dev container and GPUs of the notebook's gpudev kernel, with a button releasing them.",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ITranslator, ISettingRegistry],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    translator: ITranslator | null,
    settingRegistry: ISettingRegistry | null
  ): void => {
    const trans = (translator ?? nullTranslator).load(TRANSLATION_DOMAIN);
    const settings = app.serviceManager.serverSettings;
    const indexes = new GPUIndexes(settings);
    const models = new Set<KernelBadgeModel>();
    const attached = new WeakSet<NotebookPanel>();
    let enabled = true;

    const attach = (panel: NotebookPanel): void => {
      if (attached.has(panel) || panel.isDisposed) {
        return;
      }
      attached.add(panel);
      const model = new KernelBadgeModel({
        sessionContext: panel.sessionContext,
        settings,
        indexes,
        enabled
      });
      const badge = new KernelBadge({ model, trans });
      insertInToolbar(panel, badge);
      models.add(model);
      panel.disposed.connect(() => {
        models.delete(model);
        model.dispose();
        badge.dispose();
      });
    };
    tracker.forEach(attach);
    tracker.widgetAdded.connect((_, panel) => {
      attach(panel);
    });

    if (settingRegistry) {
      settingRegistry
        .load(SETTINGS_PLUGIN_ID)
        .then(loaded => {
          const apply = (): void => {
            enabled = readShowSetting(loaded);
            for (const model of models) {
              model.enabled = enabled;
            }
          };
          apply();
          loaded.changed.connect(apply);
        })
        .catch((reason: unknown) => {
          console.error(
            `jupyter-gpudev: could not load the settings of ${SETTINGS_PLUGIN_ID}; the kernel toolbar item is shown.`,
            reason
          );
        });
    }
  }
};
