import type { ServerConnection } from '@jupyterlab/services';
import type { IDisposable } from '@lumino/disposable';

import type { GPUDevAPIError } from '../api/errors';
import { fetchKernelUsage } from '../api/usage';
import { KERNEL_USAGE_INTERVAL_MS } from '../constants';
import type { IKernelUsage } from '../types';
import { PolledModel } from './polled';
import type { IActionsState } from './polled';
import type { IStateModel } from './state';

/** One kernel's GPU use, as the toolbar items of its notebooks show it. */
export interface IKernelUsageState extends IActionsState<never> {
  /**
   * The last answer; `null` before the first one, and once the server no
   * longer knows the kernel (404). Another failure keeps the last answer.
   */
  readonly usage: IKernelUsage | null;
}

/**
 * The GPU use of one kernel, polled while one of the items watching it is
 * visible (and the browser tab is in the foreground).
 */
class KernelUsageModel extends PolledModel<
  IKernelUsageState,
  IKernelUsage,
  never
> {
  constructor(
    kernelId: string,
    fetch: (kernelId: string) => Promise<IKernelUsage>,
    options: PolledModel.IOptions
  ) {
    super(`jupyter-gpudev:kernel-usage:${kernelId}`, options, {
      status: 'loading',
      usage: null,
      error: null,
      lastUpdated: null,
      pending: new Map<string, never>()
    });
    this._kernelId = kernelId;
    this._fetch = fetch;
  }

  protected load(): Promise<IKernelUsage> {
    return this._fetch(this._kernelId);
  }

  protected applyAnswer(answer: IKernelUsage): Partial<IKernelUsageState> {
    return { usage: answer };
  }

  protected override failedState(
    error: GPUDevAPIError
  ): Partial<IKernelUsageState> {
    return error.status === 404 ? { usage: null } : {};
  }

  private readonly _kernelId: string;
  private readonly _fetch: (kernelId: string) => Promise<IKernelUsage>;
}

/**
 * The GPU use of the kernels shown in notebook toolbars, shared by every
 * item: one poll per kernel however many notebooks show it, running while
 * one of them is visible, ended when the last one stops watching.
 */
export class KernelUsages implements IDisposable {
  constructor(options: KernelUsages.IOptions = {}) {
    const settings = options.settings;
    this._fetch =
      options.fetchKernelUsage ??
      (kernelId => fetchKernelUsage(kernelId, settings));
    this._interval = options.interval ?? KERNEL_USAGE_INTERVAL_MS;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** How many kernels are watched (one poll each). */
  get size(): number {
    return this._entries.size;
  }

  /**
   * Watch the GPU use of `kernelId`. The watch starts hidden: its poll runs
   * while one of the kernel's watches is `visible`; dispose it when done.
   */
  watch(kernelId: string): KernelUsages.IWatch {
    if (this._isDisposed) {
      throw new Error('KernelUsages is disposed');
    }
    let entry = this._entries.get(kernelId);
    if (!entry) {
      entry = {
        model: new KernelUsageModel(kernelId, this._fetch, {
          interval: this._interval
        }),
        watches: new Set()
      };
      this._entries.set(kernelId, entry);
    }
    const watch = new Watch(kernelId, entry.model, this._update);
    entry.watches.add(watch);
    return watch;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    for (const entry of this._entries.values()) {
      entry.model.dispose();
    }
    this._entries.clear();
  }

  /** A watch changed: poll while one is visible, end with the last one. */
  private readonly _update = (watch: Watch): void => {
    const entry = this._entries.get(watch.kernelId);
    if (!entry || entry.model !== watch.model) {
      return;
    }
    if (watch.isDisposed) {
      entry.watches.delete(watch);
    }
    if (entry.watches.size === 0) {
      this._entries.delete(watch.kernelId);
      entry.model.dispose();
      return;
    }
    entry.model.visible = [...entry.watches].some(w => w.visible);
  };

  private readonly _entries = new Map<
    string,
    { model: KernelUsageModel; watches: Set<Watch> }
  >();
  private readonly _fetch: (kernelId: string) => Promise<IKernelUsage>;
  private readonly _interval: number;
  private _isDisposed = false;
}

export namespace KernelUsages {
  export interface IOptions {
    /** The server connection; defaults to the page's. */
    settings?: ServerConnection.ISettings;
    /** Time between two polls in milliseconds; default 10000. */
    interval?: number;
    /** Replaces the API call, for tests. */
    fetchKernelUsage?: (kernelId: string) => Promise<IKernelUsage>;
  }

  /** One item's watch of a kernel's GPU use. */
  export interface IWatch extends IDisposable {
    readonly kernelId: string;
    /** The kernel's use, shared by all its watches. */
    readonly model: IStateModel<IKernelUsageState>;
    /** Whether the item is visible: the poll runs while one watch is. */
    visible: boolean;
  }
}

class Watch implements KernelUsages.IWatch {
  constructor(
    readonly kernelId: string,
    readonly model: KernelUsageModel,
    private readonly _changed: (watch: Watch) => void
  ) {}

  get visible(): boolean {
    return this._visible;
  }
  set visible(value: boolean) {
    if (this._isDisposed || value === this._visible) {
      return;
    }
    this._visible = value;
    this._changed(this);
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._visible = false;
    this._changed(this);
  }

  private _visible = false;
  private _isDisposed = false;
}
