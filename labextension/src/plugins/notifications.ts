/** The notifications of the main plugin: lists that fail, idle GPU kernels. */
import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import type { ISignal } from '@lumino/signaling';

import type { GPUDevAPIError } from '../api/errors';
import {
  reclaimMessage,
  runReclaimAction
} from '../components/containers/Reclaims';
import type { ContainersModel } from '../models/containers';
import type { IPolledState } from '../models/polled';
import type {
  IReclaimsState,
  ReclaimAction,
  ReclaimsModel
} from '../models/reclaims';
import type { IReclaim } from '../types';

/**
 * Call `notify` once each time `model` goes from `ready` to `error` (not on
 * every failed poll), unless `skipWhen` says another notification already
 * tells it.
 */
export function notifyOnTransitionToError<S extends IPolledState>(
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
export function notifyOnReclaims(
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
      const holding = state.holdings.get(reclaim.kernel_id);
      const id = Notification.warning(reclaimMessage(reclaim, trans, holding), {
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
              'Shut the kernel down now: its GPUs are freed (its container is stopped and kept; a pod of its own is deleted unless it has changes)'
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
