import type { ServerConnection } from '@jupyterlab/services';

import { fetchReclaims, keepKernel, releaseKernel } from '../api/kernels';
import { fetchKernelUsage } from '../api/usage';
import { RECLAIMS_INTERVAL_MS } from '../constants';
import type { IKernelUsage, IReclaim, IReclaimsResponse } from '../types';
import { PolledModel } from './polled';
import type { IActionsState } from './polled';

/** An action on a pending reclaim that can be under way. */
export type ReclaimAction = 'keep' | 'release';

/** The GPU kernels about to be shut down for idleness. */
export interface IReclaimsState extends IActionsState<ReclaimAction> {
  /**
   * The pending reclaims of the last answer, soonest first. In `error` they
   * are those of the last successful answer.
   */
  readonly reclaims: readonly IReclaim[];
  /** Seconds a GPU kernel may stay idle; `null` until the first answer. */
  readonly idleTimeout: number | null;
  /** How long before a reclaim it is listed; `null` until the first answer. */
  readonly warningSeconds: number | null;
  /** Actions under way, by kernel id. */
  readonly pending: ReadonlyMap<string, ReclaimAction>;
  /**
   * What each kernel of `reclaims` holds on its GPUs, by kernel id, when the
   * server could tell.
   */
  readonly holdings: ReadonlyMap<string, IKernelUsage>;
}

/** One answer of the poll: the reclaims, and what their kernels hold. */
interface IReclaimsAnswer {
  response: IReclaimsResponse;
  holdings: Map<string, IKernelUsage>;
}

/**
 * The GPU kernels the server will shut down for idleness unless they are
 * used or kept, refreshed by a poll, and the actions on them. Each poll
 * also asks what each listed kernel holds on its GPUs (one request per
 * pending reclaim: a failure only leaves it unknown).
 *
 * Unlike the other models it keeps polling while the panel is hidden: the
 * warning matters most when the user is elsewhere. It still stands by while
 * the browser tab is in the background.
 *
 * Actions reject with a `GPUDevAPIError`; the list is refreshed after each.
 */
export class ReclaimsModel extends PolledModel<
  IReclaimsState,
  IReclaimsAnswer,
  ReclaimAction
> {
  constructor(options: ReclaimsModel.IOptions = {}) {
    super(
      'jupyter-gpudev:reclaims',
      { ...options, interval: options.interval ?? RECLAIMS_INTERVAL_MS },
      {
        status: 'loading',
        reclaims: [],
        idleTimeout: null,
        warningSeconds: null,
        error: null,
        lastUpdated: null,
        pending: new Map(),
        holdings: new Map()
      }
    );
    const settings = options.serverSettings;
    this._api = {
      fetchReclaims: () => fetchReclaims(settings),
      keepKernel: kernelId => keepKernel(kernelId, settings),
      releaseKernel: kernelId => releaseKernel(kernelId, settings),
      fetchKernelUsage: kernelId => fetchKernelUsage(kernelId, settings),
      ...options.api
    };
  }

  /** Keep an idle GPU kernel: its idle time starts again. */
  async keep(kernelId: string): Promise<void> {
    return this._reclaimAction(kernelId, 'keep', () =>
      this._api.keepKernel(kernelId)
    );
  }

  /** Shut an idle GPU kernel down now; its container is stopped and kept. */
  async release(kernelId: string): Promise<void> {
    return this._reclaimAction(kernelId, 'release', () =>
      this._api.releaseKernel(kernelId)
    );
  }

  protected override get pausesWhenHidden(): boolean {
    return false;
  }

  protected async load(): Promise<IReclaimsAnswer> {
    const response = await this._api.fetchReclaims();
    const holdings = new Map<string, IKernelUsage>();
    await Promise.all(
      response.reclaims.map(async reclaim => {
        try {
          holdings.set(
            reclaim.kernel_id,
            await this._api.fetchKernelUsage(reclaim.kernel_id)
          );
        } catch {
          // Unknown: the warning says what it can without it.
        }
      })
    );
    return { response, holdings };
  }

  protected applyAnswer(answer: IReclaimsAnswer): Partial<IReclaimsState> {
    const { response, holdings } = answer;
    return {
      reclaims: response.reclaims,
      idleTimeout: response.idle_timeout,
      warningSeconds: response.warning_seconds,
      holdings
    };
  }

  private _reclaimAction(
    kernelId: string,
    action: ReclaimAction,
    run: () => Promise<void>
  ): Promise<void> {
    return this.act(
      kernelId,
      action,
      `The kernel ${kernelId} is busy with another action.`,
      async () => {
        await run();
        // Done: the server no longer lists it.
        this.patch({
          reclaims: this.state.reclaims.filter(r => r.kernel_id !== kernelId)
        });
      }
    );
  }

  private readonly _api: ReclaimsModel.IAPI;
}

export namespace ReclaimsModel {
  /** The calls the model makes; each can be replaced, for tests. */
  export interface IAPI {
    fetchReclaims: () => Promise<IReclaimsResponse>;
    keepKernel: (kernelId: string) => Promise<void>;
    releaseKernel: (kernelId: string) => Promise<void>;
    fetchKernelUsage: (kernelId: string) => Promise<IKernelUsage>;
  }

  export interface IOptions extends PolledModel.IOptions {
    /** Time between two refreshes in milliseconds; default 10000. */
    interval?: number;
    /** The server connection; defaults to the page's. */
    serverSettings?: ServerConnection.ISettings;
    /** Replaces some API calls, for tests. */
    api?: Partial<IAPI>;
  }
}
