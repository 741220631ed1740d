import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { isPortNumber, toAPIError, webPortURL } from '../api';
import type { GPUDevAPIError } from '../api';
import { changedPaths, isUncommittedChanges, leasesByGPU } from '../model';
import type {
  ContainerAction,
  ContainersModel,
  IReclaimsState,
  IStartState,
  ReclaimAction,
  ReclaimsModel
} from '../model';
import type {
  IDevContainer,
  IEnvironment,
  IEnvironmentProblem,
  IHostInfo,
  IReclaim,
  IStartProgress,
  IStartRequest
} from '../tokens';
import { ChangedPaths, notifyError } from './ErrorDetails';
import { useModelState } from './hooks';
import { ProgressBar } from './ProgressBar';
import { ReclaimWarning, runReclaimAction } from './Reclaims';

interface ISectionProps {
  model: ContainersModel;
  trans: TranslationBundle;
}

/**
 * The "Environments" section: each environment with a Start button, its
 * GPU count and host, the progress of a start, and the broken definitions.
 */
export function EnvironmentsSection({
  model,
  hosts,
  trans
}: ISectionProps & {
  /** The hosts the panel knows; a host can be picked among the reachable. */
  hosts: readonly IHostInfo[];
}): React.JSX.Element {
  const state = useModelState(model);
  const headingId = React.useId();
  const reachable = React.useMemo(
    () => hosts.filter(host => host.reachable),
    [hosts]
  );
  const onStart = React.useCallback(
    (env: IEnvironment, request: IStartRequest) => {
      model.start(request).then(
        container => {
          Notification.success(
            trans.__('GPU Dev: %1 is running', container.name),
            { autoClose: 5000 }
          );
        },
        (reason: unknown) => {
          notifyError(
            trans.__('GPU Dev: could not start %1', env.display_name),
            toAPIError(reason),
            trans
          );
        }
      );
    },
    [model, trans]
  );

  return (
    <section className="jp-gpudev-section" aria-labelledby={headingId}>
      <h3 id={headingId} className="jp-gpudev-section-heading">
        {trans.__('Environments')}
      </h3>
      <div className="jp-gpudev-body" aria-busy={state.status === 'loading'}>
        {state.status === 'loading' && (
          <p className="jp-gpudev-message" role="status">
            {trans.__('Loading environments…')}
          </p>
        )}
        {state.status === 'error' && state.error && (
          <div className="jp-gpudev-error" role="alert">
            <p className="jp-gpudev-error-title">
              {trans.__('Could not load the environments and dev containers')}
            </p>
            <p className="jp-gpudev-error-message">{state.error.message}</p>
          </div>
        )}
        {state.status === 'ready' && state.environments.length === 0 && (
          <div className="jp-gpudev-empty">
            <p className="jp-gpudev-empty-title">
              {trans.__('No environments')}
            </p>
            <p className="jp-gpudev-hint">
              {trans.__(
                'Add a .devcontainer/devcontainer.json to the folder Jupyter serves, or define environments with c.EnvironmentManager.environments.'
              )}
            </p>
          </div>
        )}
        {state.environments.length > 0 && (
          <ul className="jp-gpudev-rows" aria-label={trans.__('Environments')}>
            {state.environments.map(env => (
              <EnvironmentRow
                key={env.name}
                env={env}
                start={state.starting.get(env.name)}
                hosts={reachable}
                onStart={onStart}
                trans={trans}
              />
            ))}
          </ul>
        )}
        {state.problems.length > 0 && (
          <Problems problems={state.problems} trans={trans} />
        )}
      </div>
    </section>
  );
}

/** What an environment asks for, in a few words ("1 GPU", "CPU"...). */
export function gpuRequirementText(
  env: IEnvironment,
  trans: TranslationBundle
): string {
  switch (env.gpu.mode) {
    case 'none':
      return trans.__('CPU');
    case 'optional':
      return trans.__('GPU optional');
    default:
      return trans._n('%1 GPU', '%1 GPUs', env.gpu.count);
  }
}

function gpuRequirementTitle(
  env: IEnvironment,
  trans: TranslationBundle
): string | undefined {
  const parts: string[] = [];
  if (env.gpu.mode === 'optional' && env.gpu.count > 0) {
    parts.push(
      trans._n(
        '%1 GPU when one is free, else the CPU',
        '%1 GPUs when they are free, else the CPU',
        env.gpu.count
      )
    );
  }
  if (env.gpu.model) {
    parts.push(trans.__('model: %1', env.gpu.model));
  }
  if (env.gpu.min_memory_mib !== null) {
    parts.push(
      trans.__(
        'at least %1 MiB of GPU memory',
        numberFormat.format(env.gpu.min_memory_mib)
      )
    );
  }
  return parts.length > 0 ? parts.join(' · ') : undefined;
}

const numberFormat = new Intl.NumberFormat();

/** The value of the host picker that lets the server place the container. */
const ANY_HOST = '';

function EnvironmentRow({
  env,
  start,
  hosts,
  onStart,
  trans
}: {
  env: IEnvironment;
  start: IStartState | undefined;
  hosts: readonly IHostInfo[];
  onStart: (env: IEnvironment, request: IStartRequest) => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  const headingId = React.useId();
  const gpusId = React.useId();
  const hostId = React.useId();
  const minGPUs = env.gpu.mode === 'required' ? 1 : 0;
  // `null` until edited: the environment's own count (and, for an optional
  // GPU, the server's fallback to the CPU when none is free).
  const [gpusText, setGPUsText] = React.useState<string | null>(null);
  // `ANY_HOST` (the default): the server places the container on a host
  // that can take it.
  const [host, setHost] = React.useState<string>(ANY_HOST);
  // Named GPUs (UUIDs) of the chosen host; empty: leased by count.
  const [named, setNamed] = React.useState<readonly string[]>([]);
  const pickerId = React.useId();

  const showHosts = hosts.length > 1;
  const selectedHost =
    host !== ANY_HOST && hosts.some(candidate => candidate.name === host)
      ? host
      : ANY_HOST;
  // GPUs can be named on one host: the chosen one, or the only one.
  const pickHost =
    selectedHost !== ANY_HOST
      ? hosts.find(candidate => candidate.name === selectedHost)
      : hosts.length === 1
        ? hosts[0]
        : undefined;
  const units =
    pickHost && env.gpu.mode !== 'none' ? leasableUnits(pickHost) : [];
  const chosen = named.filter(uuid => units.some(unit => unit.uuid === uuid));
  const hostGPUs = hosts.find(candidate => candidate.name === selectedHost)
    ?.gpus.gpus.length;
  const maxGPUs =
    showHosts && hostGPUs !== undefined && hostGPUs >= minGPUs
      ? hostGPUs
      : undefined;

  const shown =
    chosen.length > 0
      ? String(chosen.length)
      : (gpusText ?? String(env.gpu.count));
  const gpus = /^\d+$/.test(shown.trim()) ? Number(shown.trim()) : NaN;
  const valid =
    chosen.length > 0 ||
    (Number.isInteger(gpus) &&
      gpus >= minGPUs &&
      (maxGPUs === undefined || gpus <= maxGPUs));
  const starting = start !== undefined;

  const submit = (): void => {
    if (!valid || starting) {
      return;
    }
    const request: IStartRequest = { environment: env.name };
    if (chosen.length > 0) {
      request.gpu_uuids = [...chosen];
    } else if (gpus !== env.gpu.count) {
      request.gpus = gpus;
    }
    if (showHosts && selectedHost !== ANY_HOST) {
      request.host = selectedHost;
    }
    onStart(env, request);
  };

  return (
    <li
      className="jp-gpudev-row jp-gpudev-env"
      data-testid={`gpudev-env-${env.name}`}
      aria-labelledby={headingId}
    >
      <div className="jp-gpudev-row-header">
        <h4
          id={headingId}
          className="jp-gpudev-row-name"
          title={trans.__('%1 (from %2)', env.name, env.source)}
        >
          {env.display_name}
        </h4>
        <span
          className={
            'jp-gpudev-badge ' +
            (env.gpu.mode === 'none'
              ? 'jp-gpudev-badge-muted'
              : 'jp-gpudev-badge-info')
          }
          title={gpuRequirementTitle(env, trans)}
        >
          {gpuRequirementText(env, trans)}
        </span>
      </div>
      <p className="jp-gpudev-row-detail" title={env.image ?? undefined}>
        {env.image ?? trans.__('image built from a Dockerfile')}
      </p>
      <form
        className="jp-gpudev-env-controls"
        onSubmit={event => {
          event.preventDefault();
          submit();
        }}
      >
        <label className="jp-gpudev-field" htmlFor={gpusId}>
          <span className="jp-gpudev-field-label">{trans.__('GPUs')}</span>
          <input
            id={gpusId}
            className="jp-gpudev-input jp-gpudev-gpus-input"
            data-testid={`gpudev-env-gpus-${env.name}`}
            type="number"
            inputMode="numeric"
            min={minGPUs}
            max={maxGPUs}
            step={1}
            value={shown}
            disabled={starting}
            readOnly={chosen.length > 0}
            aria-invalid={!valid}
            title={
              env.gpu.mode === 'required'
                ? trans.__('Number of GPUs to lease (at least 1)')
                : trans.__('Number of GPUs to lease (0 for the CPU only)')
            }
            onChange={event => {
              setGPUsText(event.currentTarget.value);
            }}
          />
        </label>
        {showHosts && (
          <label className="jp-gpudev-field" htmlFor={hostId}>
            <span className="jp-gpudev-field-label">{trans.__('Host')}</span>
            <select
              id={hostId}
              className="jp-gpudev-input jp-gpudev-host-select"
              data-testid={`gpudev-env-host-${env.name}`}
              value={selectedHost}
              disabled={starting}
              title={trans.__(
                'Where to start it; with "Any host" the server picks a host that can take it'
              )}
              onChange={event => {
                setHost(event.currentTarget.value);
              }}
            >
              <option value={ANY_HOST}>{trans.__('Any host')}</option>
              {hosts.map(candidate => (
                <option key={candidate.name} value={candidate.name}>
                  {candidate.name}
                </option>
              ))}
            </select>
          </label>
        )}
        <button
          type="submit"
          className={
            'jp-gpudev-button jp-gpudev-mod-accept' +
            (starting ? ' jp-gpudev-mod-busy' : '')
          }
          data-testid={`gpudev-env-start-${env.name}`}
          disabled={starting || !valid}
          aria-busy={starting}
          aria-label={trans.__('Start %1', env.display_name)}
          title={
            valid
              ? trans.__('Start a dev container from %1', env.display_name)
              : trans.__('Enter a valid number of GPUs')
          }
        >
          {starting ? trans.__('Starting…') : trans.__('Start')}
        </button>
      </form>
      {units.length > 0 && pickHost && (
        <details className="jp-gpudev-gpu-picker">
          <summary data-testid={`gpudev-env-pick-${env.name}`}>
            {chosen.length > 0
              ? trans._n(
                  '%1 GPU chosen on %2',
                  '%1 GPUs chosen on %2',
                  chosen.length,
                  pickHost.name
                )
              : trans.__('Choose GPUs on %1', pickHost.name)}
          </summary>
          <fieldset
            className="jp-gpudev-gpu-choices"
            disabled={starting}
            aria-describedby={pickerId}
          >
            <legend id={pickerId} className="jp-gpudev-field-hint">
              {trans.__(
                'Lease these GPUs by name; with none chosen, any free GPUs are leased by count.'
              )}
            </legend>
            {units.map(unit => (
              <label
                key={unit.uuid}
                className="jp-gpudev-check"
                title={
                  unit.holder ? trans.__('Held by %1', unit.holder) : unit.uuid
                }
              >
                <input
                  type="checkbox"
                  data-testid={`gpudev-env-gpu-${env.name}-${unit.uuid}`}
                  checked={chosen.includes(unit.uuid)}
                  disabled={unit.holder !== null}
                  onChange={event => {
                    const checked = event.currentTarget.checked;
                    setNamed(previous =>
                      checked
                        ? [...previous.filter(u => u !== unit.uuid), unit.uuid]
                        : previous.filter(u => u !== unit.uuid)
                    );
                  }}
                />
                <span>{unit.label}</span>
                {unit.holder && (
                  <span className="jp-gpudev-muted">
                    {trans.__('held by %1', unit.holder)}
                  </span>
                )}
              </label>
            ))}
          </fieldset>
        </details>
      )}
      {start && (
        <StartProgress
          environment={env.name}
          progress={start.progress}
          trans={trans}
        />
      )}
    </li>
  );
}

/** A GPU (or MIG instance) of a host a start can name. */
interface ILeasableUnit {
  uuid: string;
  /** `GPU 0 · NVIDIA A100` or `GPU 0 · MIG 1g.5gb`. */
  label: string;
  /** The container holding it, or `null` when it is free. */
  holder: string | null;
}

/** The units of a host a start can name, with who holds each. */
function leasableUnits(host: IHostInfo): ILeasableUnit[] {
  const leases = leasesByGPU(host.leases);
  const holder = (uuid: string): string | null =>
    leases.get(uuid)?.container ?? null;
  const units: ILeasableUnit[] = [];
  for (const gpu of host.gpus.gpus) {
    if (gpu.mig_enabled && gpu.mig_devices.length > 0) {
      for (const device of gpu.mig_devices) {
        units.push({
          uuid: device.uuid,
          label: `GPU ${gpu.index} · MIG ${device.profile}`,
          holder: holder(device.uuid) ?? holder(gpu.uuid)
        });
      }
    } else {
      units.push({
        uuid: gpu.uuid,
        label: `GPU ${gpu.index} · ${gpu.name}`,
        holder: holder(gpu.uuid)
      });
    }
  }
  return units;
}

function stageLabel(stage: string, trans: TranslationBundle): string {
  switch (stage) {
    case 'pull':
      return trans.__('Pulling the image');
    case 'build':
      return trans.__('Building the image');
    case 'lease':
      return trans.__('Leasing GPUs');
    case 'create':
      return trans.__('Creating');
    case 'start':
      return trans.__('Starting');
    case 'postCreateCommand':
      return trans.__('Running postCreateCommand');
    case 'postStartCommand':
      return trans.__('Running postStartCommand');
    case 'ready':
      return trans.__('Ready');
    default:
      return stage;
  }
}

function StartProgress({
  environment,
  progress,
  trans
}: {
  environment: string;
  progress: IStartProgress | null;
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <div
      className="jp-gpudev-progress"
      data-testid={`gpudev-start-progress-${environment}`}
      data-stage={progress?.stage ?? ''}
      role="status"
      aria-live="polite"
    >
      <p className="jp-gpudev-progress-text">
        <span className="jp-gpudev-progress-stage">
          {progress
            ? stageLabel(progress.stage, trans)
            : trans.__('Contacting the server…')}
        </span>
        {progress?.message && (
          <span className="jp-gpudev-progress-message" title={progress.message}>
            {progress.message}
          </span>
        )}
      </p>
      <ProgressBar
        current={progress?.current}
        total={progress?.total}
        label={trans.__('Progress of %1', environment)}
        trans={trans}
      />
    </div>
  );
}

function Problems({
  problems,
  trans
}: {
  problems: readonly IEnvironmentProblem[];
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <div className="jp-gpudev-problems">
      <h4 className="jp-gpudev-section-title">
        {trans._n(
          '%1 environment file has a problem',
          '%1 environment files have problems',
          new Set(problems.map(problem => problem.file)).size
        )}
      </h4>
      <ul aria-label={trans.__('Environment problems')}>
        {problems.map((problem, i) => (
          <li
            key={i}
            className={
              'jp-gpudev-problem ' +
              (problem.level === 'error'
                ? 'jp-gpudev-mod-error'
                : 'jp-gpudev-mod-warning')
            }
          >
            <span className="jp-gpudev-problem-level">
              {problem.level === 'error'
                ? trans.__('Error')
                : trans.__('Warning')}
            </span>{' '}
            {!problem.message.includes(problem.file) && (
              <span className="jp-gpudev-problem-file" title={problem.file}>
                {problem.file}
              </span>
            )}
            <div className="jp-gpudev-problem-message">{problem.message}</div>
          </li>
        ))}
      </ul>
    </div>
  );
}

/**
 * Open an existing Jupyter terminal, by its name, in the main area (the
 * panel passes the `terminal:open` command of JupyterLab).
 */
export type OpenTerminal = (name: string) => Promise<void>;

/** What the panel opens in the main area for a container. */
export type OpenKind = 'commit' | 'push' | 'logs';

/**
 * Open the commit dialog (`push` opens it ready to push a snapshot) or the
 * logs of a dev container in the main area.
 */
export type OpenContainerView = (name: string, kind: OpenKind) => void;

/**
 * The "Dev containers" section: every container with its state, GPUs,
 * ports and warnings, and the actions its state allows. Running containers
 * get a Terminal button when `openTerminal` is given, and those whose GPU
 * kernel is about to be released for idleness (given `reclaims`) a warning
 * with Keep and Release now buttons.
 */
export function ContainersSection({
  model,
  reclaims,
  openTerminal,
  openView,
  trans
}: ISectionProps & {
  /** The pending reclaims of idle GPU kernels, shown in their container's row. */
  reclaims?: ReclaimsModel | null;
  /** Opens the terminal made in a container; no Terminal button without it. */
  openTerminal?: OpenTerminal;
  /** Opens the commit dialog or the logs; no such buttons without it. */
  openView?: OpenContainerView;
}): React.JSX.Element {
  const state = useModelState(model);
  const reclaimsState = useModelState(reclaims ?? null);
  const headingId = React.useId();

  const onAction = React.useCallback(
    (container: IDevContainer, action: ContainerAction) => {
      const name = container.name;
      const failed = (reason: unknown): void => {
        notifyError(
          actionFailedTitle(action, name, trans),
          toAPIError(reason),
          trans
        );
      };
      switch (action) {
        case 'stop':
          model.stop(name).catch(failed);
          break;
        case 'start':
          model.resume(name).catch(failed);
          break;
        case 'pin':
        case 'unpin':
          model.pin(name, action === 'pin').catch(failed);
          break;
        case 'remove':
          removeWithConfirmation(model, name, trans).catch(failed);
          break;
        case 'terminal':
          if (openTerminal) {
            model.terminal(name).then(openTerminal).catch(failed);
          }
          break;
        default:
          // Web ports have their own controls (see `onPort`).
          break;
      }
    },
    [model, openTerminal, trans]
  );

  const onPort = React.useCallback(
    async (
      container: IDevContainer,
      action: PortAction,
      port: number
    ): Promise<void> => {
      if (action === 'add-port') {
        await model.addPort(container.name, port);
      } else {
        await model.removePort(container.name, port);
      }
    },
    [model]
  );

  const onReclaim = React.useCallback(
    (reclaim: IReclaim, action: ReclaimAction) => {
      if (reclaims) {
        void runReclaimAction(reclaims, model, reclaim, action, trans);
      }
    },
    [reclaims, model, trans]
  );

  const reclaimByContainer = React.useMemo(
    () =>
      new Map(
        (reclaimsState?.reclaims ?? []).map(reclaim => [
          reclaim.container,
          reclaim
        ])
      ),
    [reclaimsState?.reclaims]
  );

  const containers = state.containers;
  return (
    <section className="jp-gpudev-section" aria-labelledby={headingId}>
      <h3 id={headingId} className="jp-gpudev-section-heading">
        {trans.__('Dev containers')}
        {containers.length > 0 && (
          <span className="jp-gpudev-count">{containers.length}</span>
        )}
      </h3>
      <div className="jp-gpudev-body" aria-busy={state.status === 'loading'}>
        {state.status === 'loading' && (
          <p className="jp-gpudev-message" role="status">
            {trans.__('Loading dev containers…')}
          </p>
        )}
        {state.status !== 'loading' && containers.length === 0 && (
          <p className="jp-gpudev-message">
            {state.status === 'ready'
              ? trans.__('No dev containers. Start one from an environment.')
              : trans.__('No dev containers known.')}
          </p>
        )}
        {containers.length > 0 && (
          <ul
            className={
              'jp-gpudev-rows' +
              (state.status === 'error' ? ' jp-gpudev-mod-stale' : '')
            }
            aria-label={trans.__('Dev containers')}
          >
            {containers.map(container => (
              <ContainerRow
                key={`${container.host}/${container.name}`}
                container={container}
                pending={state.pending.get(container.name)}
                canOpenTerminal={openTerminal !== undefined}
                openView={openView}
                onAction={onAction}
                onPort={onPort}
                reclaim={reclaimByContainer.get(container.name)}
                reclaimPending={reclaimPendingOf(
                  reclaimsState,
                  reclaimByContainer.get(container.name)
                )}
                onReclaim={onReclaim}
                trans={trans}
              />
            ))}
          </ul>
        )}
      </div>
    </section>
  );
}

function reclaimPendingOf(
  state: IReclaimsState | null,
  reclaim: IReclaim | undefined
): ReclaimAction | undefined {
  return reclaim ? state?.pending.get(reclaim.kernel_id) : undefined;
}

function actionFailedTitle(
  action: ContainerAction,
  name: string,
  trans: TranslationBundle
): string {
  switch (action) {
    case 'stop':
      return trans.__('GPU Dev: could not stop %1', name);
    case 'start':
      return trans.__('GPU Dev: could not start %1', name);
    case 'pin':
      return trans.__('GPU Dev: could not pin %1', name);
    case 'unpin':
      return trans.__('GPU Dev: could not unpin %1', name);
    case 'remove':
      return trans.__('GPU Dev: could not remove %1', name);
    case 'terminal':
      return trans.__('GPU Dev: could not open a terminal in %1', name);
    case 'add-port':
      return trans.__('GPU Dev: could not add a web port to %1', name);
    case 'remove-port':
      return trans.__('GPU Dev: could not remove a web port of %1', name);
  }
}

/**
 * Remove a container; if it has uncommitted changes, ask whether to remove
 * it anyway and then force it. Rejects with the error of the last attempt.
 */
async function removeWithConfirmation(
  model: ContainersModel,
  name: string,
  trans: TranslationBundle
): Promise<void> {
  let refusal: GPUDevAPIError;
  try {
    await model.remove(name);
    return;
  } catch (reason) {
    refusal = toAPIError(reason);
    if (!isUncommittedChanges(refusal)) {
      throw refusal;
    }
  }
  const result = await showDialog({
    title: trans.__('Remove %1 with its changes?', name),
    body: <RemoveAnywayBody error={refusal} trans={trans} />,
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      Dialog.warnButton({ label: trans.__('Remove anyway') })
    ],
    defaultButton: 0
  });
  if (result.button.accept) {
    await model.remove(name, true);
  }
}

function RemoveAnywayBody({
  error,
  trans
}: {
  error: GPUDevAPIError;
  trans: TranslationBundle;
}): React.JSX.Element {
  const paths = changedPaths(error);
  return (
    <div className="jp-gpudev-error-details">
      <p>{error.message}</p>
      <p>
        {trans.__(
          'Removing the container loses these changes for good. Commit them first to keep them.'
        )}
      </p>
      {paths.length > 0 && <ChangedPaths paths={paths} trans={trans} />}
    </div>
  );
}

const RUNNING_STATES = new Set(['running', 'restarting', 'paused']);
const STARTABLE_STATES = new Set(['exited', 'created']);

function stateBadgeClass(state: string): string {
  switch (state) {
    case 'running':
      return 'jp-gpudev-badge-ok';
    case 'restarting':
    case 'paused':
    case 'removing':
      return 'jp-gpudev-badge-warn';
    case 'dead':
      return 'jp-gpudev-badge-error';
    default:
      return 'jp-gpudev-badge-muted';
  }
}

/** An ISO 8601 date as the local date and time, or the text as is. */
export function localTime(iso: string): string {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/**
 * How long ago `iso` was, in a few words: `<1 min`, `12 min`, `3 h 5 min`,
 * `2 d 4 h`; empty for a date that cannot be read.
 */
export function durationSince(
  iso: string,
  trans: TranslationBundle,
  now: number = Date.now()
): string {
  const start = new Date(iso).getTime();
  if (Number.isNaN(start)) {
    return '';
  }
  const minutes = Math.max(0, Math.floor((now - start) / 60000));
  if (minutes < 1) {
    return trans.__('<1 min');
  }
  if (minutes < 60) {
    return trans.__('%1 min', minutes);
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 24) {
    return trans.__('%1 h %2 min', hours, minutes % 60);
  }
  return trans.__('%1 d %2 h', Math.floor(hours / 24), hours % 24);
}

/** `8000 -> 127.0.0.1:49153`, by container port. */
export function portLines(ports: Readonly<Record<string, number>>): string[] {
  return Object.entries(ports)
    .sort(([a], [b]) => Number(a) - Number(b) || a.localeCompare(b))
    .map(([inside, outside]) => `${inside} -> 127.0.0.1:${outside}`);
}

function ContainerRow({
  container,
  pending,
  canOpenTerminal,
  openView,
  onAction,
  onPort,
  reclaim,
  reclaimPending,
  onReclaim,
  trans
}: {
  container: IDevContainer;
  pending: ContainerAction | undefined;
  canOpenTerminal: boolean;
  openView: OpenContainerView | undefined;
  onAction: (container: IDevContainer, action: ContainerAction) => void;
  onPort: OnPort;
  /** The pending reclaim of the container's idle GPU kernel, if any. */
  reclaim: IReclaim | undefined;
  reclaimPending: ReclaimAction | undefined;
  onReclaim: (reclaim: IReclaim, action: ReclaimAction) => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  const headingId = React.useId();
  const name = container.name;
  const running = RUNNING_STATES.has(container.state);
  const canStart = STARTABLE_STATES.has(container.state);
  const canRemove = !running && container.state !== 'removing';
  // The server opens terminals in running containers only (not paused ones).
  const canTerminal = canOpenTerminal && container.state === 'running';
  const ports = portLines(container.ports);
  const gpus = container.gpu_uuids;
  const busy = pending !== undefined;
  // Only a container that kernels share stops when its last kernel ends, so
  // only one can be pinned; one made for a kernel ends with that kernel.
  const shared = container.kernel_id === null;
  const canPin = shared && container.state !== 'removing';
  const pinning = pending === 'pin' || pending === 'unpin';
  const uncommitted = container.uncommitted ?? 0;
  const exists = container.state !== 'removing' && container.state !== 'dead';

  const viewButton = (
    kind: OpenKind,
    label: string,
    caption: string
  ): React.JSX.Element => (
    <button
      type="button"
      className="jp-gpudev-button"
      data-testid={`gpudev-container-${kind}-${name}`}
      aria-label={trans.__('%1 %2', label, name)}
      title={caption}
      onClick={() => {
        openView?.(name, kind);
      }}
    >
      {label}
    </button>
  );

  const actionButton = (
    action: ContainerAction,
    label: string,
    busyLabel: string,
    caption: string,
    extraClass = ''
  ): React.JSX.Element => (
    <button
      type="button"
      className={
        'jp-gpudev-button' +
        extraClass +
        (pending === action ? ' jp-gpudev-mod-busy' : '')
      }
      data-testid={`gpudev-container-${action}-${name}`}
      disabled={busy}
      aria-busy={pending === action}
      aria-label={trans.__('%1 %2', label, name)}
      title={caption}
      onClick={() => {
        onAction(container, action);
      }}
    >
      {pending === action ? busyLabel : label}
    </button>
  );

  return (
    <li
      className={
        'jp-gpudev-row jp-gpudev-container' +
        (running ? '' : ' jp-gpudev-mod-stopped')
      }
      data-testid={`gpudev-container-${name}`}
      data-state={container.state}
      aria-labelledby={headingId}
      aria-busy={busy}
    >
      <div className="jp-gpudev-row-header">
        <h4 id={headingId} className="jp-gpudev-row-name">
          {name}
        </h4>
        {container.pinned && (
          <span
            className="jp-gpudev-badge jp-gpudev-badge-pinned"
            data-testid={`gpudev-container-pinned-${name}`}
            title={trans.__(
              'Pinned: keeps running, with its GPUs, after its last kernel ends'
            )}
          >
            {trans.__('pinned')}
          </span>
        )}
        {uncommitted > 0 && (
          <span
            className="jp-gpudev-badge jp-gpudev-badge-warn"
            data-testid={`gpudev-container-uncommitted-${name}`}
            title={trans._n(
              '%1 change not committed yet: commit it or it is lost when the container is removed',
              '%1 changes not committed yet: commit them or they are lost when the container is removed',
              uncommitted
            )}
          >
            {trans._n('%1 change', '%1 changes', uncommitted)}
          </span>
        )}
        {!shared && (
          <span
            className="jp-gpudev-badge jp-gpudev-badge-muted"
            data-testid={`gpudev-container-kernel-${name}`}
            title={trans.__(
              'Made for one kernel (%1): it ends with that kernel',
              container.kernel_id ?? ''
            )}
          >
            {trans.__('kernel')}
          </span>
        )}
        <span
          className={'jp-gpudev-badge ' + stateBadgeClass(container.state)}
          title={container.status || undefined}
        >
          {container.state}
        </span>
      </div>
      <p className="jp-gpudev-row-detail" title={container.image || undefined}>
        {container.host
          ? trans.__('%1 on %2', container.environment, container.host)
          : container.environment}
      </p>
      <dl className="jp-gpudev-facts">
        <dt>{trans.__('GPUs')}</dt>
        <dd
          title={
            gpus.length > 0 ? trans.__('UUIDs: %1', gpus.join(', ')) : undefined
          }
        >
          {gpus.length > 0 ? gpus.length : trans.__('none (CPU)')}
        </dd>
        {running && container.started_at && (
          <>
            <dt>{trans.__('Up')}</dt>
            <dd
              data-testid={`gpudev-container-uptime-${name}`}
              title={localTime(container.started_at)}
            >
              {durationSince(container.started_at, trans)}
            </dd>
          </>
        )}
        {container.kernels !== null && (running || container.kernels > 0) && (
          <>
            <dt>{trans.__('Kernels')}</dt>
            <dd data-testid={`gpudev-container-kernels-${name}`}>
              {container.kernels}
            </dd>
          </>
        )}
        {running && container.last_activity && (
          <>
            <dt>{trans.__('Idle')}</dt>
            <dd
              data-testid={`gpudev-container-idle-${name}`}
              title={trans.__(
                'Last kernel activity: %1',
                localTime(container.last_activity)
              )}
            >
              {durationSince(container.last_activity, trans)}
            </dd>
          </>
        )}
        {ports.length > 0 && (
          <>
            <dt>{trans.__('Ports')}</dt>
            <dd>
              <ul className="jp-gpudev-ports">
                {ports.map(line => (
                  <li key={line}>{line}</li>
                ))}
              </ul>
            </dd>
          </>
        )}
        {container.status && container.status !== container.state && (
          <>
            <dt>{trans.__('Status')}</dt>
            <dd>{container.status}</dd>
          </>
        )}
      </dl>
      {container.state !== 'removing' && (
        <WebPorts
          container={container}
          pending={pending}
          onPort={onPort}
          trans={trans}
        />
      )}
      {container.warnings.length > 0 && (
        <ul className="jp-gpudev-warnings">
          {container.warnings.map((warning, i) => (
            <li key={i}>{warning}</li>
          ))}
        </ul>
      )}
      {reclaim && (
        <ReclaimWarning
          reclaim={reclaim}
          pending={reclaimPending}
          onAction={onReclaim}
          trans={trans}
        />
      )}
      <div
        className="jp-gpudev-actions"
        role="group"
        aria-label={trans.__('Actions on %1', name)}
      >
        {openView &&
          exists &&
          viewButton(
            'commit',
            trans.__('Commit'),
            trans.__(
              'Review the changes as a Dockerfile diff and commit them (write, verify, snapshot, push)'
            )
          )}
        {openView &&
          exists &&
          viewButton(
            'push',
            trans.__('Push'),
            trans.__(
              'Commit the container as an image and push it to a registry'
            )
          )}
        {openView &&
          exists &&
          viewButton(
            'logs',
            trans.__('Logs'),
            trans.__('Show the output of the container, following it')
          )}
        {canTerminal &&
          actionButton(
            'terminal',
            trans.__('Terminal'),
            trans.__('Opening…'),
            trans.__('Open a terminal with a shell inside the container')
          )}
        {running &&
          actionButton(
            'stop',
            trans.__('Stop'),
            trans.__('Stopping…'),
            trans.__('Stop the container and free its GPUs; its files are kept')
          )}
        {canPin && (
          <button
            type="button"
            className={
              'jp-gpudev-button jp-gpudev-pin' +
              (pinning ? ' jp-gpudev-mod-busy' : '')
            }
            data-testid={`gpudev-container-pin-${name}`}
            disabled={busy}
            aria-busy={pinning}
            aria-pressed={container.pinned}
            aria-label={trans.__('Pin %1', name)}
            title={
              container.pinned
                ? trans.__('Let it stop when its last kernel ends')
                : trans.__(
                    'Keep it running, with its GPUs, after its last kernel ends'
                  )
            }
            onClick={() => {
              onAction(container, container.pinned ? 'unpin' : 'pin');
            }}
          >
            {pending === 'pin'
              ? trans.__('Pinning…')
              : pending === 'unpin'
                ? trans.__('Unpinning…')
                : container.pinned
                  ? trans.__('Unpin')
                  : trans.__('Pin')}
          </button>
        )}
        {canStart &&
          actionButton(
            'start',
            trans.__('Start'),
            trans.__('Starting…'),
            trans.__('Start the container again, with the same GPUs')
          )}
        {canRemove &&
          (uncommitted > 0
            ? actionButton(
                'remove',
                trans.__('Discard'),
                trans.__('Removing…'),
                trans.__(
                  'Remove the container and throw away its uncommitted changes (asks first)'
                ),
                ' jp-gpudev-mod-warn'
              )
            : actionButton(
                'remove',
                trans.__('Remove'),
                trans.__('Removing…'),
                trans.__('Remove the container'),
                ' jp-gpudev-mod-warn'
              ))}
      </div>
    </li>
  );
}

/** An action on the web ports of a container. */
type PortAction = Extract<ContainerAction, 'add-port' | 'remove-port'>;

/** Adds or removes a web port; rejects with the server's error. */
type OnPort = (
  container: IDevContainer,
  action: PortAction,
  port: number
) => Promise<void>;

/**
 * The ports of a container served by the server's proxy, each as an "Open
 * :PORT" link (while the container runs) with a button to stop serving it,
 * and a field to serve one more. Errors are shown under the field.
 */
function WebPorts({
  container,
  pending,
  onPort,
  trans
}: {
  container: IDevContainer;
  pending: ContainerAction | undefined;
  onPort: OnPort;
  trans: TranslationBundle;
}): React.JSX.Element {
  const name = container.name;
  const labelId = React.useId();
  const inputId = React.useId();
  const errorId = React.useId();
  const inputRef = React.useRef<HTMLInputElement>(null);
  const [text, setText] = React.useState('');
  const [error, setError] = React.useState<string | null>(null);
  // The port whose removal is under way, to label its button.
  const [removing, setRemoving] = React.useState<number | null>(null);
  const running = container.state === 'running';
  const busy = pending !== undefined;
  const adding = pending === 'add-port';
  const ports = container.web_ports;

  const add = (): void => {
    if (busy) {
      return;
    }
    const trimmed = text.trim();
    const port = /^\d{1,5}$/.test(trimmed) ? Number(trimmed) : NaN;
    if (!isPortNumber(port)) {
      setError(trans.__('Enter a port number from 1 to 65535.'));
      inputRef.current?.focus();
      return;
    }
    if (ports.includes(port)) {
      setError(trans.__('Port %1 is already served.', port));
      inputRef.current?.focus();
      return;
    }
    setError(null);
    onPort(container, 'add-port', port).then(
      () => {
        setText('');
      },
      (reason: unknown) => {
        setError(toAPIError(reason).message);
      }
    );
  };

  const remove = (port: number): void => {
    if (busy) {
      return;
    }
    setError(null);
    setRemoving(port);
    onPort(container, 'remove-port', port)
      .catch((reason: unknown) => {
        setError(toAPIError(reason).message);
      })
      .finally(() => {
        setRemoving(null);
        // Its button was disabled meanwhile (and is gone if it went): keep
        // the focus in the web ports.
        inputRef.current?.focus();
      });
  };

  return (
    <div
      className="jp-gpudev-web"
      role="group"
      aria-labelledby={labelId}
      data-testid={`gpudev-web-ports-${name}`}
    >
      <span id={labelId} className="jp-gpudev-web-label">
        {trans.__('Web ports')}
      </span>
      {ports.length > 0 && (
        <ul
          className="jp-gpudev-web-ports"
          aria-label={trans.__('Web ports of %1', name)}
        >
          {ports.map(port => (
            <li key={port} className="jp-gpudev-web-port">
              {running ? (
                <a
                  className="jp-gpudev-web-link"
                  data-testid={`gpudev-web-port-${name}-${port}`}
                  href={webPortURL(name, port)}
                  target="_blank"
                  rel="noopener"
                  title={trans.__(
                    'Open port %1 of %2 in a new browser tab',
                    port,
                    name
                  )}
                >
                  {trans.__('Open :%1', port)}
                </a>
              ) : (
                <span
                  className="jp-gpudev-web-link jp-gpudev-mod-disabled"
                  data-testid={`gpudev-web-port-${name}-${port}`}
                  title={trans.__('Start the container to open port %1', port)}
                >
                  {trans.__(':%1', port)}
                </span>
              )}
              {!container.forward_ports.includes(port) && (
                <button
                  type="button"
                  className="jp-gpudev-icon-button"
                  data-testid={`gpudev-web-port-remove-${name}-${port}`}
                  disabled={busy}
                  aria-busy={removing === port}
                  aria-label={trans.__(
                    'Stop serving port %1 of %2',
                    port,
                    name
                  )}
                  title={trans.__(
                    'Stop serving port %1 (ports of the environment stay served)',
                    port
                  )}
                  onClick={() => {
                    remove(port);
                  }}
                >
                  <span aria-hidden="true">×</span>
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
      <form
        className="jp-gpudev-port-form"
        noValidate
        onSubmit={event => {
          event.preventDefault();
          add();
        }}
      >
        <label htmlFor={inputId} className="jp-gpudev-visually-hidden">
          {trans.__('Port of %1 to serve', name)}
        </label>
        <input
          ref={inputRef}
          id={inputId}
          className="jp-gpudev-input jp-gpudev-port-input"
          data-testid={`gpudev-web-port-input-${name}`}
          type="number"
          inputMode="numeric"
          min={1}
          max={65535}
          step={1}
          placeholder={trans.__('port')}
          value={text}
          readOnly={adding}
          aria-invalid={error !== null}
          aria-describedby={error !== null ? errorId : undefined}
          onChange={event => {
            setText(event.currentTarget.value);
            setError(null);
          }}
        />
        <button
          type="submit"
          className={'jp-gpudev-button' + (adding ? ' jp-gpudev-mod-busy' : '')}
          data-testid={`gpudev-web-port-add-${name}`}
          aria-disabled={busy}
          aria-label={trans.__('Add port to %1', name)}
          aria-busy={adding}
          title={trans.__(
            'Serve this port of the container through the Jupyter server'
          )}
        >
          {adding ? trans.__('Adding…') : trans.__('Add port')}
        </button>
      </form>
      {error !== null && (
        <p
          id={errorId}
          className="jp-gpudev-field-error"
          data-testid={`gpudev-web-port-error-${name}`}
          role="alert"
        >
          {error}
        </p>
      )}
    </div>
  );
}
