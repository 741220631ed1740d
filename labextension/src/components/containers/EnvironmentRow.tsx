import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { IStartState } from '../../models/containers';
import type { IEnvironment, IHostInfo, IStartRequest } from '../../types';
import { GPUPicker, leasableUnits } from './GPUPicker';
import { StartProgress } from './StartProgress';

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

export function EnvironmentRow({
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
      {env.notes !== undefined && env.notes.length > 0 && (
        <ul
          className="jp-gpudev-warnings"
          data-testid={`gpudev-env-notes-${env.name}`}
          aria-label={trans.__('What gpudev does not do of %1', env.name)}
        >
          {env.notes.map((note, i) => (
            <li key={i}>{note}</li>
          ))}
        </ul>
      )}
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
        <GPUPicker
          environment={env.name}
          host={pickHost.name}
          units={units}
          chosen={chosen}
          disabled={starting}
          onChange={setNamed}
          trans={trans}
        />
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
