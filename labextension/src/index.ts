import { ILayoutRestorer } from '@jupyterlab/application';
import type {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import type { TranslationBundle } from '@jupyterlab/translation';
import type { ISignal } from '@lumino/signaling';

import { NETWORK_ERROR } from './api';
import type { GPUDevAPIError } from './api';
import { chipIcon } from './icons';
import {
  CommitModel,
  ContainersModel,
  DEFAULT_INTERVAL_MS,
  HostsModel,
  RECLAIMS_INTERVAL_MS,
  ReclaimsModel
} from './model';
import type { IPolledState, IReclaimsState, ReclaimAction } from './model';
import type { IReclaim } from './tokens';
import { CommitPanel } from './widgets/CommitPanel';
import type { ICommitDefaults } from './widgets/CommitPanel';
import type { OpenKind } from './widgets/ContainersView';
import { notifyError } from './widgets/ErrorDetails';
import { LogsPanel } from './widgets/LogsPanel';
import { notebookToolbarPlugin } from './notebook';
import { HostsPanel, PANEL_ID, TRANSLATION_DOMAIN } from './widgets/HostsPanel';
import { reclaimMessage, runReclaimAction } from './widgets/Reclaims';

export {
  GPUDevAPIError,
  addHost,
  addWebPort,
  commitContainer,
  fetchDiff,
  fetchLogs,
  fetchContainers,
  fetchEnvironments,
  fetchHost,
  fetchHosts,
  fetchReclaims,
  keepKernel,
  openContainerTerminal,
  pinContainer,
  releaseKernel,
  removeContainer,
  removeHost,
  removeWebPort,
  requestAPI,
  resumeContainer,
  startContainer,
  stopContainer,
  webPortURL
} from './api';
export type { IStartOptions } from './api';
export {
  CommitModel,
  ContainersModel,
  HostsModel,
  ReclaimsModel
} from './model';
export type {
  ContainerAction,
  ICommitChoices,
  ICommitState,
  HostAction,
  IContainersState,
  IHostsState,
  IReclaimsState,
  IStartState,
  ReclaimAction
} from './model';
export { HostsPanel } from './widgets/HostsPanel';
export type { OpenTerminal } from './widgets/ContainersView';
export type * from './tokens';

/** The plugin id; also names the settings schema (schema/plugin.json). */
export const PLUGIN_ID = 'jupyter-gpudev:plugin';

/** The commands this extension adds. */
export namespace CommandIDs {
  export const openPanel = 'gpudev:open-panel';
  /** Open the commit dialog of the dev container `name`. */
  export const commit = 'gpudev:commit';
  /** Open the logs of the dev container `name`. */
  export const logs = 'gpudev:logs';
}

/** JupyterLab's command opening an existing terminal by `name` (terminal extension). */
const OPEN_TERMINAL_COMMAND = 'terminal:open';

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'A left sidebar panel listing the Docker hosts with their engines and GPUs, the environments and the dev containers.',
  autoStart: true,
  optional: [ILayoutRestorer, ISettingRegistry, ICommandPalette, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null,
    translator: ITranslator | null
  ): void => {
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
      openTerminal: name => openTerminal(app, name, trans),
      openView,
      translator: translator ?? nullTranslator
    });
    panel.disposed.connect(() => {
      model.dispose();
      containers.dispose();
      reclaims.dispose();
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
  }
};

/**
 * Open the Jupyter terminal `name` (made in a dev container) in the main
 * area. Without JupyterLab's terminal extension, or when opening it fails,
 * say so and shut the terminal down again rather than leave it running
 * unseen.
 */
async function openTerminal(
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

/** The settings the commit dialog reads when it opens. */
interface IPreferences {
  /** Tick "Verify" in a new commit dialog. */
  commitVerify: boolean;
  /** The registry and namespace of snapshot tags, e.g. `127.0.0.1:5000/team`. */
  snapshotRepository: string;
}

const DEFAULT_PREFERENCES: IPreferences = {
  commitVerify: false,
  snapshotRepository: ''
};

function readPreferences(settings: ISettingRegistry.ISettings): IPreferences {
  const verify = settings.get('commitVerify').composite;
  const repository = settings.get('snapshotRepository').composite;
  return {
    commitVerify: verify === true,
    snapshotRepository:
      typeof repository === 'string'
        ? repository.trim().replace(/\/+$/, '')
        : ''
  };
}

/**
 * What a commit dialog starts with: Push opens it ready to push a snapshot
 * tagged `REPOSITORY/ENVIRONMENT:YYYYMMDD-HHMM` when a repository is set.
 */
function commitDefaults(
  kind: OpenKind,
  preferences: IPreferences,
  environment: string,
  now: Date = new Date()
): ICommitDefaults {
  if (kind !== 'push') {
    return { write: true, verify: preferences.commitVerify };
  }
  const pad = (n: number): string => String(n).padStart(2, '0');
  const stamp =
    `${now.getFullYear()}${pad(now.getMonth() + 1)}${pad(now.getDate())}` +
    `-${pad(now.getHours())}${pad(now.getMinutes())}`;
  const repository = preferences.snapshotRepository;
  const name =
    environment
      .toLowerCase()
      .replace(/[^a-z0-9._-]+/g, '-')
      .replace(/^[^a-z0-9]+/, '') || 'env';
  return {
    write: false,
    verify: false,
    snapshot: repository ? `${repository}/${name}:${stamp}` : '',
    push: true
  };
}

/** The `refreshInterval` setting in seconds, falling back to the default. */
function readIntervalSeconds(settings: ISettingRegistry.ISettings): number {
  const value = settings.get('refreshInterval').composite;
  return typeof value === 'number' && Number.isFinite(value) && value >= 1
    ? value
    : DEFAULT_INTERVAL_MS / 1000;
}

/**
 * Call `notify` once each time `model` goes from `ready` to `error` (not on
 * every failed poll), unless `skipWhen` says another notification already
 * tells it.
 */
function notifyOnTransitionToError<S extends IPolledState>(
  model: { readonly state: S; readonly stateChanged: ISignal<unknown, S> },
  options: {
    notify: (error: GPUDevAPIError, state: S) => void;
    skipWhen?: (error: GPUDevAPIError) => boolean;
  }
): void {
  const { notify, skipWhen = () => false } = options;
  let previous: IPolledState['status'] = model.state.status;
  model.stateChanged.connect((_, state) => {
    const wasReady = previous === 'ready';
    previous = state.status;
    const error = state.error;
    if (!wasReady || state.status !== 'error' || !error || skipWhen(error)) {
      return;
    }
    notify(error, state);
  });
}

/**
 * Show one warning notification for each pending reclaim of an idle GPU
 * kernel when it appears (not on every poll), with Keep and Release now
 * actions; dismiss it once the reclaim leaves the list (kept, used or
 * released). A reclaim whose time moved (the kernel was used, then idle
 * again) is a new one.
 */
function notifyOnReclaims(
  reclaims: ReclaimsModel,
  containers: ContainersModel,
  trans: TranslationBundle
): void {
  /** The notification of each reclaim, by kernel id. */
  const shown = new Map<string, { id: string; reclaimAt: number }>();
  const act = (reclaim: IReclaim, action: ReclaimAction): void => {
    void runReclaimAction(reclaims, containers, reclaim, action, trans);
  };
  const onChange = (_: ReclaimsModel, state: IReclaimsState): void => {
    // Without an answer nothing is known to have changed: keep them all.
    if (state.status !== 'ready') {
      return;
    }
    const current = new Map(state.reclaims.map(r => [r.kernel_id, r]));
    for (const [kernelId, notice] of [...shown]) {
      const reclaim = current.get(kernelId);
      if (!reclaim || Math.abs(reclaim.reclaim_at - notice.reclaimAt) > 1) {
        Notification.dismiss(notice.id);
        shown.delete(kernelId);
      }
    }
    for (const reclaim of state.reclaims) {
      if (shown.has(reclaim.kernel_id)) {
        continue;
      }
      const id = Notification.warning(reclaimMessage(reclaim, trans), {
        autoClose: false,
        actions: [
          {
            label: trans.__('Keep'),
            caption: trans.__(
              'Keep the kernel and its GPUs: its idle time starts again'
            ),
            displayType: 'accent',
            callback: () => {
              act(reclaim, 'keep');
            }
          },
          {
            label: trans.__('Release now'),
            caption: trans.__(
              'Shut the kernel down now: its container is stopped and kept, its GPUs freed'
            ),
            displayType: 'warn',
            callback: () => {
              act(reclaim, 'release');
            }
          }
        ]
      });
      shown.set(reclaim.kernel_id, { id, reclaimAt: reclaim.reclaim_at });
    }
  };
  reclaims.stateChanged.connect(onChange);
}

export { notebookToolbarPlugin } from './notebook';

export default [plugin, notebookToolbarPlugin];
