import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { toAPIError } from '../../api/errors';
import type { ContainersModel } from '../../models/containers';
import type { ReclaimAction, ReclaimsModel } from '../../models/reclaims';
import type { IKernelUsage, IReclaim } from '../../types';
import { notifyError } from '../common/ErrorDetails';
import { holdsText } from '../common/usageText';

/** When the kernel will be released, as hours and minutes of the local time. */
export function reclaimTime(reclaim: IReclaim): string {
  return new Date(reclaim.reclaim_at * 1000).toLocaleTimeString([], {
    hour: '2-digit',
    minute: '2-digit'
  });
}

/** How long the kernel has been idle, in whole minutes. */
export function idleText(reclaim: IReclaim, trans: TranslationBundle): string {
  const minutes = Math.floor(reclaim.idle_seconds / 60);
  return minutes < 1 ? trans.__('under 1 min') : trans.__('%1 min', minutes);
}

/**
 * What the kernel of a reclaim holds, `4.2 GiB on H100 GPU 0, 0% now`;
 * empty when unknown.
 */
export function reclaimHolds(
  holding: IKernelUsage | undefined,
  trans: TranslationBundle
): string {
  return holding && holding.reason === null
    ? holdsText(holding.gpus, trans)
    : '';
}

/**
 * The warning shown for a pending reclaim, with what the kernel holds when
 * known (kept near the 140 characters of a toast).
 */
export function reclaimMessage(
  reclaim: IReclaim,
  trans: TranslationBundle,
  holding?: IKernelUsage
): string {
  const holds = reclaimHolds(holding, trans);
  const gpus = trans._n('%1 GPU', '%1 GPUs', reclaim.gpus);
  return holds
    ? trans.__(
        'GPU kernel in %1 (%2) has been idle for %3 and will be released at %4; it holds %5',
        reclaim.container,
        gpus,
        idleText(reclaim, trans),
        reclaimTime(reclaim),
        holds
      )
    : trans.__(
        'GPU kernel in %1 (%2) has been idle for %3 and will be released at %4',
        reclaim.container,
        gpus,
        idleText(reclaim, trans),
        reclaimTime(reclaim)
      );
}

/**
 * Keep or release the kernel of a pending reclaim; a failure is shown with
 * `notifyError`. After a release the dev containers are refreshed: the
 * kernel's container is stopped.
 */
export async function runReclaimAction(
  reclaims: ReclaimsModel,
  containers: ContainersModel | null,
  reclaim: IReclaim,
  action: ReclaimAction,
  trans: TranslationBundle
): Promise<void> {
  try {
    if (action === 'keep') {
      await reclaims.keep(reclaim.kernel_id);
    } else {
      await reclaims.release(reclaim.kernel_id);
      await containers?.refresh();
    }
  } catch (reason) {
    notifyError(
      action === 'keep'
        ? trans.__(
            'GPU Dev: could not keep the kernel in %1',
            reclaim.container
          )
        : trans.__(
            'GPU Dev: could not release the kernel in %1',
            reclaim.container
          ),
      toAPIError(reason),
      trans
    );
  }
}

/**
 * The warning line of a dev container whose kernel is about to be released
 * for idleness, with Keep and Release now buttons.
 */
export function ReclaimWarning({
  reclaim,
  holding,
  pending,
  onAction,
  trans
}: {
  reclaim: IReclaim;
  /** What the kernel holds on its GPUs, when known. */
  holding?: IKernelUsage;
  pending: ReclaimAction | undefined;
  onAction: (reclaim: IReclaim, action: ReclaimAction) => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  const name = reclaim.container;
  const busy = pending !== undefined;
  const time = reclaimTime(reclaim);
  const holds = reclaimHolds(holding, trans);
  return (
    <div
      className="jp-gpudev-reclaim"
      data-testid={`gpudev-reclaim-${name}`}
      role="status"
    >
      <p
        className="jp-gpudev-reclaim-text"
        title={reclaimMessage(reclaim, trans, holding)}
      >
        {holds
          ? trans.__(
              'Idle GPU kernel (%1): released at %2 unless kept',
              holds,
              time
            )
          : trans.__('Idle GPU kernel: released at %1 unless kept', time)}
      </p>
      <div
        className="jp-gpudev-actions"
        role="group"
        aria-label={trans.__('Idle kernel in %1', name)}
      >
        <button
          type="button"
          className={
            'jp-gpudev-button jp-gpudev-mod-accept' +
            (pending === 'keep' ? ' jp-gpudev-mod-busy' : '')
          }
          data-testid={`gpudev-reclaim-keep-${name}`}
          disabled={busy}
          aria-busy={pending === 'keep'}
          title={trans.__(
            'Keep the kernel and its GPUs: its idle time starts again'
          )}
          onClick={() => {
            onAction(reclaim, 'keep');
          }}
        >
          {pending === 'keep' ? trans.__('Keeping…') : trans.__('Keep')}
        </button>
        <button
          type="button"
          className={
            'jp-gpudev-button jp-gpudev-mod-warn' +
            (pending === 'release' ? ' jp-gpudev-mod-busy' : '')
          }
          data-testid={`gpudev-reclaim-release-${name}`}
          disabled={busy}
          aria-busy={pending === 'release'}
          title={trans.__(
            'Shut the kernel down now: its GPUs are freed (its container is stopped and kept; a pod of its own is deleted unless it has changes)'
          )}
          onClick={() => {
            onAction(reclaim, 'release');
          }}
        >
          {pending === 'release'
            ? trans.__('Releasing…')
            : trans.__('Release now')}
        </button>
      </div>
    </div>
  );
}
