import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { IContainerGPUUse } from '../../models/usage';
import type { IDevContainer } from '../../types';
import { durationSince, localTime } from '../common/time';
import { ContainerGPUUse } from './ContainerGPUUse';

/** `8000 -> 127.0.0.1:49153`, by container port. */
export function portLines(ports: Readonly<Record<string, number>>): string[] {
  return Object.entries(ports)
    .sort(([a], [b]) => Number(a) - Number(b) || a.localeCompare(b))
    .map(([inside, outside]) => `${inside} -> 127.0.0.1:${outside}`);
}

/**
 * The facts of a container: GPUs, their use (while it runs and the use is
 * known), uptime, kernels, idle time, ports, status.
 */
export function ContainerFacts({
  container,
  running,
  gpuUse = null,
  trans
}: {
  container: IDevContainer;
  running: boolean;
  /** How it uses each GPU; `null` when not known. */
  gpuUse?: readonly IContainerGPUUse[] | null;
  trans: TranslationBundle;
}): React.JSX.Element {
  const name = container.name;
  const ports = portLines(container.ports);
  const gpus = container.gpu_uuids;
  return (
    <dl className="jp-gpudev-facts">
      <dt>{trans.__('GPUs')}</dt>
      <dd
        title={
          gpus.length > 0 ? trans.__('UUIDs: %1', gpus.join(', ')) : undefined
        }
      >
        {gpus.length > 0 ? gpus.length : trans.__('none (CPU)')}
      </dd>
      {running && gpuUse && gpuUse.length > 0 && (
        <>
          <dt>{trans.__('GPU use')}</dt>
          <dd>
            <ContainerGPUUse name={name} uses={gpuUse} trans={trans} />
          </dd>
        </>
      )}
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
  );
}
