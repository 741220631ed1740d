/**
 * The notebook toolbar item of a gpudev kernel: the dev container and GPUs
 * the notebook's kernel runs with, what it holds on them (polled while the
 * notebook is shown, one poll per kernel however many notebooks show it:
 * `KernelUsages`, models/kernelUsage.ts), and a "Release GPU" button. The state of
 * each notebook's item is a `KernelBadgeModel` (models/kernelBadge.ts); the
 * item is drawn by components/notebook/KernelBadge.tsx.
 */
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';

import { KernelBadge } from '../components/notebook/KernelBadge';
import {
  NOTEBOOK_TOOLBAR_PLUGIN_ID,
  PLUGIN_ID,
  SettingKeys,
  TOOLBAR_ITEM_NAME,
  TRANSLATION_DOMAIN
} from '../constants';
import { GPUIndexes, KernelBadgeModel } from '../models/kernelBadge';
import { KernelUsages } from '../models/kernelUsage';
import { IGPUDevModel } from '../tokens';

/**
 * The toolbar item the gpudev one is put before, when the toolbar has it:
 * the spacer, so the item ends the left-hand group. A narrow toolbar moves
 * its last items (the kernel's name and status) into its overflow menu
 * first, and this item after them.
 */
const SPACER_ITEM = 'spacer';

/** Where the item goes in a toolbar without a spacer (after the cell type). */
const FALLBACK_INDEX = 10;

/** The `showKernelToolbar` setting, true unless set to false. */
function readShowSetting(settings: ISettingRegistry.ISettings): boolean {
  return settings.get(SettingKeys.showKernelToolbar).composite !== false;
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
    "A notebook toolbar item showing the dev container and GPUs of the notebook's gpudev kernel, what it holds on them, with a button releasing them.",
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ITranslator, ISettingRegistry, IGPUDevModel],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    translator: ITranslator | null,
    settingRegistry: ISettingRegistry | null,
    gpudev: IGPUDevModel | null
  ): void => {
    const trans = (translator ?? nullTranslator).load(TRANSLATION_DOMAIN);
    const settings = app.serviceManager.serverSettings;
    // The GPU indexes come from the panel's host list when the main plugin
    // runs (no request of its own then), else from the host asked for.
    const indexes = new GPUIndexes({ settings, hosts: gpudev?.hosts });
    const usages = new KernelUsages({ settings });
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
        usages,
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
        .load(PLUGIN_ID)
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
            `jupyter-gpudev: could not load the settings of ${PLUGIN_ID}; the kernel toolbar item is shown.`,
            reason
          );
        });
    }
  }
};
