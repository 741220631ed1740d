/**
 * Outputs of gpudev kernels rendered untrusted, when the server says so in
 * its page config (`c.GPUDevApp.untrusted_kernel_outputs`, on by default in
 * shared mode): one `OutputTrustGuard` (models/outputTrust.ts) per notebook
 * and per console, watching each of its code cells.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import type { ICellModel } from '@jupyterlab/cells';
import { IConsoleTracker } from '@jupyterlab/console';
import type { ConsolePanel } from '@jupyterlab/console';
import { PageConfig } from '@jupyterlab/coreutils';
import { INotebookTracker } from '@jupyterlab/notebook';
import type { NotebookPanel } from '@jupyterlab/notebook';

import {
  KERNEL_OUTPUTS_PAGE_CONFIG,
  UNTRUSTED_OUTPUTS_PLUGIN_ID
} from '../constants';
import {
  OutputTrustGuard,
  parseKernelOutputs,
  type KernelOutputs
} from '../models/outputTrust';

/** Guard the cells of `panel`, a notebook, for as long as it is open. */
function guardNotebook(panel: NotebookPanel, policy: KernelOutputs): void {
  const guard = new OutputTrustGuard({
    sessionContext: panel.sessionContext,
    rendermime: panel.content.rendermime,
    policy,
    kind: 'notebook'
  });
  const watchAll = (): void => {
    const cells = panel.content.model?.cells;
    if (!cells) {
      return;
    }
    for (const model of cells) {
      guard.watch(model);
    }
  };
  const onCells = (
    _: unknown,
    change: { newValues: readonly ICellModel[] }
  ): void => {
    for (const model of change.newValues) {
      guard.watch(model);
    }
  };
  let cells = panel.content.model?.cells ?? null;
  cells?.changed.connect(onCells);
  watchAll();
  panel.content.modelChanged.connect(() => {
    cells?.changed.disconnect(onCells);
    cells = panel.content.model?.cells ?? null;
    cells?.changed.connect(onCells);
    watchAll();
  });
  panel.disposed.connect(() => {
    cells?.changed.disconnect(onCells);
    guard.dispose();
  });
}

/** Guard the cells of `panel`, a console, for as long as it is open. */
function guardConsole(panel: ConsolePanel, policy: KernelOutputs): void {
  const console = panel.console;
  const guard = new OutputTrustGuard({
    sessionContext: panel.sessionContext,
    rendermime: console.rendermime,
    policy,
    kind: 'console'
  });
  for (const cell of console.cells) {
    guard.watch(cell.model);
  }
  if (console.promptCell) {
    guard.watch(console.promptCell.model);
  }
  // Prompt cells, then the cells of other clients of the kernel.
  console.promptCellCreated.connect((_, cell) => {
    guard.watch(cell.model);
  });
  console.cells.changed.connect((_, change) => {
    for (const cell of change.newValues) {
      guard.watch(cell.model);
    }
  });
  panel.disposed.connect(() => {
    guard.dispose();
  });
}

/**
 * Outputs of gpudev kernels in notebooks and consoles render untrusted (no
 * script, HTML sanitised) when the server says so.
 */
export const untrustedOutputsPlugin: JupyterFrontEndPlugin<void> = {
  id: UNTRUSTED_OUTPUTS_PLUGIN_ID,
  description:
    'Renders the outputs of kernels in dev containers untrusted (no JavaScript, HTML sanitised) when the server is configured so (c.GPUDevApp.untrusted_kernel_outputs).',
  autoStart: true,
  optional: [INotebookTracker, IConsoleTracker],
  activate: (
    _app: JupyterFrontEnd,
    notebooks: INotebookTracker | null,
    consoles: IConsoleTracker | null
  ): void => {
    const policy = parseKernelOutputs(
      PageConfig.getOption(KERNEL_OUTPUTS_PAGE_CONFIG)
    );
    if (policy === 'trusted') {
      return;
    }
    if (notebooks) {
      notebooks.forEach(panel => {
        guardNotebook(panel, policy);
      });
      notebooks.widgetAdded.connect((_, panel) => {
        guardNotebook(panel, policy);
      });
    }
    if (consoles) {
      consoles.forEach(panel => {
        guardConsole(panel, policy);
      });
      consoles.widgetAdded.connect((_, panel) => {
        guardConsole(panel, policy);
      });
    }
  }
};
