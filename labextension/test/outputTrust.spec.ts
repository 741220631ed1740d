/**
 * Outputs of gpudev kernels rendered untrusted (models/outputTrust.ts): the
 * page config read, which kernels are gpudev's, and the guard on real
 * JupyterLab cell models and rendermime, its session replaced.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import { CodeCellModel } from '@jupyterlab/cells';
import {
  RenderMimeRegistry,
  standardRendererFactories
} from '@jupyterlab/rendermime';
import type { IRenderMime } from '@jupyterlab/rendermime';
import type { KernelMessage } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import {
  isGPUDevKernel,
  OutputTrustGuard,
  parseKernelOutputs,
  untrust,
  WIDGET_VIEW_MIMETYPE,
  widgetModelId
} from '../src/models/outputTrust';
import type { KernelOutputs } from '../src/models/outputTrust';

/** The kernelspec of environment `gpu` as the server lists it (kernels/kernelspecs.py). */
const GPUDEV_SPEC = {
  metadata: {
    kernel_provisioner: { provisioner_name: 'gpudev', config: {} },
    gpudev: { environment: 'gpu', gpus: 1, mode: 'required' }
  }
};

/** A hostile output: script in HTML, JavaScript, and its text. */
const HOSTILE: KernelMessage.IDisplayDataMsg['content'] & {
  output_type: 'display_data';
} = {
  output_type: 'display_data',
  data: {
    'application/javascript': 'window.__gpudevPwned = 1',
    'text/html': '<b>hi</b><script>window.__gpudevPwned = 1</script>',
    'text/plain': '<HTML>'
  },
  metadata: {},
  transient: {}
};

/** A session whose kernel is named `name`, with the signals the guard reads. */
class FakeSession {
  constructor(public name: string | null) {}
  readonly iopubMessage = new Signal<this, KernelMessage.IMessage>(this);
  readonly kernelChanged = new Signal<this, { newValue: null }>(this);
  readonly specsManager = {
    specs: {
      default: 'python3',
      kernelspecs: {
        'gpudev-gpu': GPUDEV_SPEC,
        'admin-gpu': { ...GPUDEV_SPEC, name: 'admin-gpu' },
        python3: { metadata: {} }
      }
    }
  };
  get session() {
    return this.name === null ? null : { kernel: { name: this.name } };
  }
  /** The kernel opens a comm of `target` (ipywidgets: jupyter.widget). */
  openComm(id: string, target = 'jupyter.widget'): void {
    this.iopubMessage.emit({
      channel: 'iopub',
      header: { msg_type: 'comm_open' },
      content: { comm_id: id, target_name: target, data: {} }
    } as unknown as KernelMessage.IMessage);
  }
}

/** Let the microtasks queued by the guard run. */
async function flush(): Promise<void> {
  await Promise.resolve();
  await Promise.resolve();
}

/** What CodeCell.execute does to a cell's model before it sends the code. */
function startExecution(model: CodeCellModel): void {
  model.sharedModel.transact(() => {
    model.clearExecution();
  });
  model.executionState = 'running';
  model.trusted = true;
}

/** A widget renderer as jupyterlab_widgets registers it: not safe. */
const widgetFactory: IRenderMime.IRendererFactory = {
  safe: false,
  mimeTypes: [WIDGET_VIEW_MIMETYPE],
  createRenderer: () => {
    throw new Error('not rendered here');
  }
};

function setUp(
  kernel: string | null,
  policy: KernelOutputs = 'untrusted',
  kind: 'notebook' | 'console' = 'notebook'
) {
  const session = new FakeSession(kernel);
  const rendermime = new RenderMimeRegistry({
    initialFactories: standardRendererFactories
  });
  rendermime.addFactory(widgetFactory, -10);
  const guard = new OutputTrustGuard({
    sessionContext: session as unknown as ISessionContext,
    rendermime,
    policy,
    kind
  });
  const model = new CodeCellModel();
  guard.watch(model);
  return { session, rendermime, guard, model };
}

/** What a standalone cell model says when made outside a notebook (yjs). */
const YJS_STANDALONE = 'Add Yjs type to a document before reading data';

beforeAll(() => {
  const warn = console.warn.bind(console);
  jest.spyOn(console, 'warn').mockImplementation((...args: unknown[]) => {
    if (!String(args[0]).includes(YJS_STANDALONE)) {
      warn(...args);
    }
  });
});

afterAll(() => {
  jest.restoreAllMocks();
});

describe('parseKernelOutputs', () => {
  it('reads the three values the server writes', () => {
    expect(parseKernelOutputs('trusted')).toBe('trusted');
    expect(parseKernelOutputs('untrusted')).toBe('untrusted');
    expect(parseKernelOutputs('untrusted-no-widgets')).toBe(
      'untrusted-no-widgets'
    );
  });

  it("is JupyterLab's own rules without a server saying anything", () => {
    expect(parseKernelOutputs('')).toBe('trusted');
    expect(parseKernelOutputs(undefined)).toBe('trusted');
    expect(parseKernelOutputs(null)).toBe('trusted');
  });

  it('is the strictest for a value it does not know', () => {
    expect(parseKernelOutputs('untrusted-some-day')).toBe(
      'untrusted-no-widgets'
    );
    expect(parseKernelOutputs('true')).toBe('untrusted-no-widgets');
  });
});

describe('isGPUDevKernel', () => {
  it('knows the kernels of environments and of shared containers by name', () => {
    expect(isGPUDevKernel('gpudev-gpu')).toBe(true);
    expect(isGPUDevKernel('gpudev--gpudev-alice-gpu-1a2b')).toBe(true);
  });

  it('knows a kernelspec of another name by its provisioner or its gpudev metadata', () => {
    for (const provisioner of ['gpudev', 'gpudev-service']) {
      expect(
        isGPUDevKernel('team-gpu', {
          metadata: { kernel_provisioner: { provisioner_name: provisioner } }
        })
      ).toBe(true);
    }
    expect(
      isGPUDevKernel('team-gpu', { metadata: { gpudev: { environment: 'x' } } })
    ).toBe(true);
  });

  it('leaves other kernels alone', () => {
    expect(isGPUDevKernel('python3')).toBe(false);
    expect(isGPUDevKernel('python3', { metadata: {} })).toBe(false);
    expect(isGPUDevKernel('gpudev')).toBe(false);
    expect(isGPUDevKernel('mygpudev-x', null)).toBe(false);
    expect(
      isGPUDevKernel('other', {
        metadata: {
          kernel_provisioner: { provisioner_name: 'local-provisioner' },
          gpudev: null
        }
      })
    ).toBe(false);
  });
});

describe('widgetModelId', () => {
  it('is the model id of a widget view, if any', () => {
    expect(widgetModelId({ [WIDGET_VIEW_MIMETYPE]: { model_id: 'abc' } })).toBe(
      'abc'
    );
    expect(widgetModelId({ 'text/plain': 'x' })).toBeUndefined();
    expect(
      widgetModelId({ [WIDGET_VIEW_MIMETYPE]: { model_id: 3 } })
    ).toBeUndefined();
  });
});

describe('OutputTrustGuard', () => {
  it('untrusts a cell a gpudev kernel runs before its first output', async () => {
    // Given a notebook cell on a gpudev kernel, untrusted outputs
    const { rendermime, model } = setUp('gpudev-gpu');
    // When it runs (marked trusted, as JupyterLab does)
    startExecution(model);
    expect(model.trusted).toBe(true);
    await flush();
    // Then it is untrusted, its metadata too (no signature on save)
    expect(model.trusted).toBe(false);
    expect(model.getMetadata('trusted')).toBe(false);
    // And its output comes untrusted: sanitised HTML, never the JavaScript
    model.outputs.add(HOSTILE);
    const output = model.outputs.get(0);
    expect(output.trusted).toBe(false);
    expect(rendermime.preferredMimeType(output.data, 'ensure')).toBe(
      'text/html'
    );
  });

  it('untrusts it again at each run', async () => {
    // Given a gpudev cell run once
    const { model } = setUp('gpudev-gpu');
    startExecution(model);
    await flush();
    // When it runs again (clearExecution marks it trusted first)
    startExecution(model);
    await flush();
    // Then it is untrusted again
    expect(model.trusted).toBe(false);
  });

  it('knows a gpudev kernel of another name by its kernelspec', async () => {
    const { model } = setUp('admin-gpu');
    startExecution(model);
    await flush();
    expect(model.trusted).toBe(false);
  });

  it('leaves the cells of other kernels trusted', async () => {
    // Given a python3 kernel
    const { model } = setUp('python3');
    // When a cell runs
    startExecution(model);
    await flush();
    // Then it is trusted, as JupyterLab makes it
    expect(model.trusted).toBe(true);
    model.outputs.add(HOSTILE);
    expect(model.outputs.get(0).trusted).toBe(true);
  });

  it('does nothing when the server says trusted', async () => {
    const { model, rendermime } = setUp('gpudev-gpu', 'trusted');
    startExecution(model);
    await flush();
    expect(model.trusted).toBe(true);
    expect(
      rendermime.preferredMimeType(
        { [WIDGET_VIEW_MIMETYPE]: { model_id: 'w' }, 'text/plain': 'w' },
        'ensure'
      )
    ).toBe('text/plain');
  });

  it('leaves "Trust Notebook" to the user in a notebook, not in a console', async () => {
    // Given a notebook cell and a console cell on gpudev kernels
    const notebook = setUp('gpudev-gpu', 'untrusted', 'notebook');
    const console = setUp('gpudev-gpu', 'untrusted', 'console');
    untrust(notebook.model);
    untrust(console.model);
    // When each is marked trusted without running (the user's Trust
    // command; another client's execution shown in a console)
    notebook.model.trusted = true;
    console.model.trusted = true;
    await flush();
    // Then the notebook's stays trusted, the console's does not
    expect(notebook.model.trusted).toBe(true);
    expect(console.model.trusted).toBe(false);
  });

  it('renders the widgets the kernel opened, never other widget views', () => {
    // Given a gpudev kernel that opened widget w1
    const { session, rendermime } = setUp('gpudev-gpu');
    session.openComm('w1');
    session.openComm('not-a-widget', 'other.target');
    const view = (id: string) => ({
      [WIDGET_VIEW_MIMETYPE]: { model_id: id },
      'text/plain': 'IntSlider(value=0)'
    });
    // Then an untrusted output of w1 renders as the widget
    expect(rendermime.preferredMimeType(view('w1'), 'ensure')).toBe(
      WIDGET_VIEW_MIMETYPE
    );
    expect(rendermime.preferredMimeType(view('w1'), 'prefer')).toBe(
      WIDGET_VIEW_MIMETYPE
    );
    // And the view of a widget it did not open (saved in a notebook file),
    // or of another comm, as text
    expect(rendermime.preferredMimeType(view('w2'), 'ensure')).toBe(
      'text/plain'
    );
    expect(rendermime.preferredMimeType(view('not-a-widget'), 'ensure')).toBe(
      'text/plain'
    );
    // And JupyterLab's own choice for the rest, trusted or not
    expect(rendermime.preferredMimeType(HOSTILE.data, 'ensure')).toBe(
      'text/html'
    );
    const lab = new RenderMimeRegistry({
      initialFactories: standardRendererFactories
    });
    expect(rendermime.preferredMimeType(HOSTILE.data, 'any')).toBe(
      lab.preferredMimeType(HOSTILE.data, 'any')
    );

    // When the kernel changes, its widgets are forgotten
    session.kernelChanged.emit({ newValue: null });
    expect(rendermime.preferredMimeType(view('w1'), 'ensure')).toBe(
      'text/plain'
    );
  });

  it('renders no widget untrusted when the server says untrusted-no-widgets', async () => {
    const { session, rendermime, model } = setUp(
      'gpudev-gpu',
      'untrusted-no-widgets'
    );
    session.openComm('w1');
    startExecution(model);
    await flush();
    expect(model.trusted).toBe(false);
    expect(
      rendermime.preferredMimeType(
        { [WIDGET_VIEW_MIMETYPE]: { model_id: 'w1' }, 'text/plain': 'w' },
        'ensure'
      )
    ).toBe('text/plain');
  });

  it('stops once disposed, and on a kernel that is not gpudev', async () => {
    // Given a guard whose kernel opened widget w1
    const { session, rendermime, guard, model } = setUp('gpudev-gpu');
    session.openComm('w1');
    const view = { [WIDGET_VIEW_MIMETYPE]: { model_id: 'w1' } };
    // When the kernel is a python3 one, its widget choice is JupyterLab's
    session.name = 'python3';
    expect(guard.active).toBe(false);
    expect(rendermime.preferredMimeType(view, 'ensure')).toBeUndefined();
    session.name = 'gpudev-gpu';
    expect(guard.active).toBe(true);
    // When it is disposed, cells run trusted again
    guard.dispose();
    expect(guard.isDisposed).toBe(true);
    expect(guard.active).toBe(false);
    startExecution(model);
    await flush();
    expect(model.trusted).toBe(true);
    expect(rendermime.preferredMimeType(view, 'ensure')).toBeUndefined();
  });

  it('watches code cells only, each once', () => {
    const { guard } = setUp(null);
    const model = new CodeCellModel();
    const connect = jest.spyOn(model.stateChanged, 'connect');
    guard.watch(model);
    guard.watch(model);
    expect(connect).toHaveBeenCalledTimes(1);
    // And without a kernel it is not active
    expect(guard.active).toBe(false);
  });
});
