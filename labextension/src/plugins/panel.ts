/**
 * The main plugin: the GPU Dev panel in the left sidebar, its commands,
 * the commit and logs views, the notifications; it provides the panel's
 * polled models (`IGPUDevModel`).
 */
import { ILayoutRestorer } from '@jupyterlab/application';
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import type { TranslationBundle } from '@jupyterlab/translation';

import { NETWORK_ERROR } from '../api/errors';
import { CommitPanel } from '../components/commit/CommitPanel';
import { notifyError } from '../components/common/ErrorDetails';
import { LogsPanel } from '../components/containers/LogsPanel';
import type { OpenKind } from '../components/containers/types';
import { HostsPanel } from '../components/hosts/HostsPanel';
import {
  CommandIDs,
  DEFAULT_INTERVAL_MS,
  OPEN_TERMINAL_COMMAND,
  PANEL_ID,
  PLUGIN_ID,
  RECLAIMS_INTERVAL_MS,
  TRANSLATION_DOMAIN
} from '../constants';
import { chipIcon } from '../icons';
import { CommitModel } from '../models/commit';
import { ContainersModel } from '../models/containers';
import { HostsModel } from '../models/hosts';
import { ReclaimsModel } from '../models/reclaims';
import { UsageModel } from '../models/usage';
import { IGPUDevModel } from '../tokens';
import { notifyOnReclaims, notifyOnTransitionToError } from './notifications';
import {
  commitDefaults,
  DEFAULT_PREFERENCES,
  readIntervalSeconds,
  readPreferences
} from './preferences';
import type { IPreferences } from './preferences';

export const panelPlugin: JupyterFrontEndPlugin<IGPUDevModel> = {
  id: PLUGIN_ID,
  description:
    'A left sidebar panel listing the Docker hosts with their engines and GPUs, the environments and the dev containers.',
  autoStart: true,
  provides: IGPUDevModel,
  optional: [ILayoutRestorer, ISettingRegistry, ICommandPalette, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    translator: ITranslator | null
  ): IGPUDevModel => {
    const trans = (translator ?? nullTranslator).load(TRANSLATION_DOMAIN);

    const model = new HostsModel({
      serverSettings: app.serviceManager.serverSettings,
      interval: DEFAULT_INTERVAL_MS
    });
    const containers = new ContainersModel({
      serverSettings: app.serviceManager.serverSettings,
      interval: DEFAULT_INTERVAL_MS
    });
    // Polled whether the panel is shown or not: the warning of an idle GPU
    // kernel matters most while the user is elsewhere.
    const reclaims = new ReclaimsModel({
      serverSettings: app.serviceManager.serverSettings,
      interval: RECLAIMS_INTERVAL_MS
    });
    // The GPUs' use by process, one request for all hosts per poll, while
    // the panel is shown (no notification: a server without it shows none).
    const usage = new UsageModel({
      serverSettings: app.serviceManager.serverSettings,
      interval: DEFAULT_INTERVAL_MS
    });
    const preferences: IPreferences = { ...DEFAULT_PREFERENCES };
    const views = new Map<string, CommitPanel | LogsPanel>();
    const openView = (name: string, kind: OpenKind): void => {
      const key = `${kind === 'logs' ? 'logs' : 'commit'}:${name}`;
      const open = views.get(key);
      if (open && !open.isDisposed) {
        app.shell.activateById(open.id);
        return;
      }
      const serverSettings = app.serviceManager.serverSettings;
      const widget =
        kind === 'logs'
          ? new LogsPanel({ name, trans, serverSettings })
          : new CommitPanel({
              model: new CommitModel({ name, serverSettings }),
              trans,
              defaults: commitDefaults(
                kind,
                preferences,
                containers.state.containers.find(c => c.name === name)
                  ?.environment ?? name
              )
            });
      widget.title.icon = chipIcon;
      views.set(key, widget);
      widget.disposed.connect(() => {
        if (views.get(key) === widget) {
          views.delete(key);
        }
      });
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
    };
    const panel = new HostsPanel({
      model,
      containers,
      reclaims,
      usage,
      openTerminal: name => openTerminal(app, name, trans),
      openView,
      translator: translator ?? nullTranslator
    });
    panel.disposed.connect(() => {
      model.dispose();
      containers.dispose();
      reclaims.dispose();
      usage.dispose();
    });
    app.shell.add(panel, 'left', { rank: 600 });
    if (restorer) {
      restorer.add(panel, PANEL_ID);
    }

    app.commands.addCommand(CommandIDs.openPanel, {
      label: trans.__('Open GPU Dev panel'),
      caption: trans.__(
        'Show the Docker hosts and their GPUs, the environments and the dev containers'
      ),
      icon: args => (args.isPalette ? undefined : chipIcon),
      execute: () => {
        app.shell.activateById(panel.id);
      }
    });
    const nameArg = (args: { name?: unknown }): string =>
      typeof args.name === 'string' ? args.name : '';
    app.commands.addCommand(CommandIDs.commit, {
      label: args =>
        nameArg(args)
          ? trans.__('Commit %1', nameArg(args))
          : trans.__('Commit a dev container'),
      caption: trans.__(
        'Review the changes of a dev container as a Dockerfile diff and commit them'
      ),
      isEnabled: args => nameArg(args) !== '',
      execute: args => {
        openView(nameArg(args), args.push === true ? 'push' : 'commit');
      }
    });
    app.commands.addCommand(CommandIDs.logs, {
      label: args =>
        nameArg(args)
          ? trans.__('Logs of %1', nameArg(args))
          : trans.__('Logs of a dev container'),
      isEnabled: args => nameArg(args) !== '',
      execute: args => {
        openView(nameArg(args), 'logs');
      }
    });
    if (palette) {
      palette.addItem({
        command: CommandIDs.openPanel,
        category: trans.__('GPU Dev')
      });
    }

    // The hosts: the details show the state of each host.
    notifyOnTransitionToError(model, {
      notify: (error, state) => {
        notifyError(
          trans.__('GPU Dev: hosts unavailable'),
          error,
          trans,
          state.hosts
        );
      }
    });
    // The environments and dev containers, unless the server is out of
    // reach or the hosts failed too: the hosts' notification says it.
    notifyOnTransitionToError(containers, {
      skipWhen: error =>
        error.code === NETWORK_ERROR || model.state.status === 'error',
      notify: error => {
        notifyError(
          trans.__('GPU Dev: environments and dev containers unavailable'),
          error,
          trans
        );
      }
    });
    notifyOnReclaims(reclaims, containers, trans);
    // The pending reclaims, unless the server is out of reach or another
    // list failed too: their notification says it. That holds only while
    // the panel is shown: hidden, the other polls stand by (their state is
    // stale and they notify nothing) while this one goes on.
    notifyOnTransitionToError(reclaims, {
      skipWhen: error =>
        (model.visible &&
          (error.code === NETWORK_ERROR || model.state.status === 'error')) ||
        (containers.visible && containers.state.status === 'error'),
      notify: error => {
        notifyError(
          trans.__('GPU Dev: idle GPU kernels unavailable'),
          error,
          trans
        );
      }
    });

    if (settingRegistry) {
      settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          const apply = (): void => {
            const interval = readIntervalSeconds(settings) * 1000;
            model.interval = interval;
            containers.interval = interval;
            usage.interval = interval;
            Object.assign(preferences, readPreferences(settings));
          };
          apply();
          settings.changed.connect(apply);
        })
        .catch((reason: unknown) => {
          console.error(
            `jupyter-gpudev: could not load the settings of ${PLUGIN_ID}; using a ${DEFAULT_INTERVAL_MS / 1000} s refresh interval.`,
            reason
          );
        });
    }
    return { hosts: model, containers, reclaims, usage };
  }
};

/**
 * Open the Jupyter terminal `name` (made in a dev container) in the main
 * area. Without JupyterLab's terminal extension, or when opening it fails,
 * say so and shut the terminal down again rather than leave it running
 * unseen.
 */
export async function openTerminal(
  app: JupyterFrontEnd,
  name: string,
  trans: TranslationBundle
): Promise<void> {
  const shutDown = (): Promise<void> =>
    app.serviceManager.terminals.shutdown(name).catch(() => undefined);
  if (!app.commands.hasCommand(OPEN_TERMINAL_COMMAND)) {
    Notification.error(
      trans.__(
        'GPU Dev: terminals are not available in this JupyterLab (the terminal extension is disabled or missing).'
      ),
      { autoClose: false }
    );
    await shutDown();
    return;
  }
  // terminal:open starts a shell on the server under that name when none
  // runs: never let a shell that ended pass for the container's.
  const terminals = app.serviceManager.terminals;
  await terminals.refreshRunning();
  if (![...terminals.running()].some(model => model.name === name)) {
    throw new Error(
      trans.__(
        'The shell in the container ended as soon as it started: is the container still running?'
      )
    );
  }
  try {
    await app.commands.execute(OPEN_TERMINAL_COMMAND, { name });
  } catch (reason) {
    await shutDown();
    const cause = reason instanceof Error ? reason.message : String(reason);
    throw new Error(
      trans.__(
        'Could not open terminal %1 (%2); it has been shut down.',
        name,
        cause
      )
    );
  }
}
