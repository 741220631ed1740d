import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { ContainerAction } from '../../models/containers';
import type { ReclaimAction } from '../../models/reclaims';
import type { IContainerGPUUse } from '../../models/usage';
import type { IDevContainer, IKernelUsage, IReclaim } from '../../types';
import { ContainerActions } from './ContainerActions';
import { ContainerFacts } from './ContainerFacts';
import { ReclaimWarning } from './Reclaims';
import type { OpenContainerView } from './types';
import { WebPorts } from './WebPorts';
import type { OnPort } from './WebPorts';

/** The states in which a container runs (and holds its GPUs). */
export const RUNNING_STATES = new Set(['running', 'restarting', 'paused']);

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

/**
 * One dev container of the Dev containers section: its name and badges,
 * facts, web ports, warnings, the warning of a pending reclaim and the
 * actions its state allows.
 */
export function ContainerRow({
  container,
  pending,
  canOpenTerminal,
  openView,
  onAction,
  onPort,
  reclaim,
  reclaimHolding,
  reclaimPending,
  onReclaim,
  gpuUse,
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
  /** What the kernel of `reclaim` holds on its GPUs, when known. */
  reclaimHolding?: IKernelUsage;
  reclaimPending: ReclaimAction | undefined;
  onReclaim: (reclaim: IReclaim, action: ReclaimAction) => void;
  /** How the container uses each GPU; `null` when not known. */
  gpuUse?: readonly IContainerGPUUse[] | null;
  trans: TranslationBundle;
}): React.JSX.Element {
  const headingId = React.useId();
  const name = container.name;
  const running = RUNNING_STATES.has(container.state);
  return (
    <li
      className={
        'jp-gpudev-row jp-gpudev-container' +
        (running ? '' : ' jp-gpudev-mod-stopped')
      }
      data-testid={`gpudev-container-${name}`}
      data-state={container.state}
      aria-labelledby={headingId}
      aria-busy={pending !== undefined}
    >
      <div className="jp-gpudev-row-header">
        <h4 id={headingId} className="jp-gpudev-row-name">
          {name}
        </h4>
        <ContainerBadges container={container} trans={trans} />
      </div>
      <p className="jp-gpudev-row-detail" title={container.image || undefined}>
        {container.host
          ? trans.__('%1 on %2', container.environment, container.host)
          : container.environment}
      </p>
      <ContainerFacts
        container={container}
        running={running}
        gpuUse={gpuUse ?? null}
        trans={trans}
      />
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
          holding={reclaimHolding}
          pending={reclaimPending}
          onAction={onReclaim}
          trans={trans}
        />
      )}
      <ContainerActions
        container={container}
        running={running}
        pending={pending}
        canOpenTerminal={canOpenTerminal}
        openView={openView}
        onAction={onAction}
        trans={trans}
      />
    </li>
  );
}

/** The badges of a container: pinned, uncommitted changes, kernel, state. */
function ContainerBadges({
  container,
  trans
}: {
  container: IDevContainer;
  trans: TranslationBundle;
}): React.JSX.Element {
  const name = container.name;
  const uncommitted = container.uncommitted ?? 0;
  return (
    <>
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
      {container.kernel_id !== null && (
        <span
          className="jp-gpudev-badge jp-gpudev-badge-muted"
          data-testid={`gpudev-container-kernel-${name}`}
          title={trans.__(
            'Made for one kernel (%1): it ends with that kernel',
            container.kernel_id
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
    </>
  );
}
