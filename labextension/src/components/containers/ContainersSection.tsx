import * as React from 'react';

import { toAPIError } from '../../api/errors';
import type { ContainerAction } from '../../models/containers';
import type {
  IReclaimsState,
  ReclaimAction,
  ReclaimsModel
} from '../../models/reclaims';
import { containerGPUUse } from '../../models/usage';
import type { UsageModel } from '../../models/usage';
import type { IDevContainer, IKernelUsage, IReclaim } from '../../types';
import { notifyError } from '../common/ErrorDetails';
import { useModelState } from '../common/hooks';
import { actionFailedTitle, removeWithConfirmation } from './containerDialogs';
import { ContainerRow } from './ContainerRow';
import { runReclaimAction } from './Reclaims';
import type { OpenContainerView, OpenTerminal, ISectionProps } from './types';
import type { PortAction } from './WebPorts';

/**
 * The "Dev containers" section: every container with its state, GPUs (and,
 * given `usage`, how it uses them), ports and warnings, and the actions its
 * state allows. Running containers get a Terminal button when
 * `openTerminal` is given, and those whose GPU kernel is about to be
 * released for idleness (given `reclaims`) a warning, with what the kernel
 * holds, and Keep and Release now buttons.
 */
export function ContainersSection({
  model,
  reclaims,
  usage,
  openTerminal,
  openView,
  trans
}: ISectionProps & {
  /** The pending reclaims of idle GPU kernels, shown in their container's row. */
  reclaims?: ReclaimsModel | null;
  /** The GPUs' use, shown per GPU in each running container's row. */
  usage?: UsageModel | null;
  /** Opens the terminal made in a container; no Terminal button without it. */
  openTerminal?: OpenTerminal;
  /** Opens the commit dialog or the logs; no such buttons without it. */
  openView?: OpenContainerView;
}): React.JSX.Element {
  const state = useModelState(model);
  const reclaimsState = useModelState(reclaims ?? null);
  const usageState = useModelState(usage ?? null);
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
                reclaimHolding={holdingOf(
                  reclaimsState,
                  reclaimByContainer.get(container.name)
                )}
                gpuUse={
                  usageState
                    ? containerGPUUse(
                        usageState.hosts.get(container.host),
                        container.name,
                        container.gpu_uuids
                      )
                    : null
                }
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

function holdingOf(
  state: IReclaimsState | null,
  reclaim: IReclaim | undefined
): IKernelUsage | undefined {
  return reclaim ? state?.holdings.get(reclaim.kernel_id) : undefined;
}
