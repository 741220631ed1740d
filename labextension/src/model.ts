import type { ServerConnection } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';
import { Signal } from '@lumino/signaling';
import type { ISignal } from '@lumino/signaling';

import { fetchHosts, toAPIError } from './api';
import type { GPUDevAPIError } from './api';
import type { IHostInfo, IHostsResponse } from './tokens';

/** Default time between two refreshes of the host list, in milliseconds. */
export const DEFAULT_INTERVAL_MS = 5000;

/** The longest the poll waits between two attempts while failing, in milliseconds. */
export const MAX_INTERVAL_MS = 60000;

/** What the panel shows. */
export interface IHostsState {
  /** `loading` until the first answer, then `ready` or `error`. */
  readonly status: 'loading' | 'ready' | 'error';
  /**
   * The hosts of the last answer. In `error` they are the hosts the server
   * listed with the error (with the reason each one is unreachable), if any.
   */
  readonly hosts: readonly IHostInfo[];
  readonly error: GPUDevAPIError | null;
  /** When the server last answered (successfully or not). */
  readonly lastUpdated: Date | null;
}

/**
 * The list of Docker hosts, refreshed by a poll.
 *
 * The poll backs off while requests fail and stands by while the panel is
 * hidden (`visible` is false) or the browser tab is in the background.
 */
export class HostsModel {
  constructor(options: HostsModel.IOptions = {}) {
    const { serverSettings } = options;
    this._fetch = options.fetchHosts ?? (() => fetchHosts(serverSettings));
    this._poll = new Poll<void, GPUDevAPIError>({
      auto: options.auto ?? true,
      factory: () => this._update(),
      frequency: {
        interval: clampInterval(options.interval ?? DEFAULT_INTERVAL_MS),
        backoff: true,
        max: MAX_INTERVAL_MS
      },
      name: 'jupyter-gpudev:hosts',
      standby: () => {
        if (this._forced) {
          return 'never';
        }
        return this._visible ? 'when-hidden' : true;
      }
    });
  }

  /** The current state; replaced (never mutated) on each change. */
  get state(): IHostsState {
    return this._state;
  }

  /** Emitted with the new state each time the server answers. */
  get stateChanged(): ISignal<this, IHostsState> {
    return this._stateChanged;
  }

  /**
   * Whether the panel showing the model is visible. While it is not, the
   * poll stands by; becoming visible refreshes at once.
   */
  get visible(): boolean {
    return this._visible;
  }
  set visible(value: boolean) {
    if (this._visible === value) {
      return;
    }
    this._visible = value;
    if (value && !this.isDisposed) {
      void this._poll.refresh();
    }
  }

  /** Time between two refreshes in milliseconds (at least 1000). */
  get interval(): number {
    return this._poll.frequency.interval;
  }
  set interval(value: number) {
    const interval = clampInterval(value);
    if (this.isDisposed || interval === this._poll.frequency.interval) {
      return;
    }
    this._poll.frequency = {
      ...this._poll.frequency,
      interval,
      max: Math.max(MAX_INTERVAL_MS, interval)
    };
    if (this._visible) {
      // Apply the new interval now rather than after the pending one.
      void this._poll.refresh();
    }
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Ask the server again now. The returned promise resolves once the answer
   * has been applied to `state` (it never rejects: failures land in `state`).
   */
  async refresh(): Promise<void> {
    if (this.isDisposed) {
      return;
    }
    const answered = new Promise<void>(resolve => {
      const done = (): void => {
        this._stateChanged.disconnect(done);
        this._poll.disposed.disconnect(done);
        resolve();
      };
      this._stateChanged.connect(done);
      this._poll.disposed.connect(done);
    });
    // A refresh asked for by the user runs even if the poll stands by.
    this._forced = true;
    await this._poll.refresh();
    await answered;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _update(): Promise<void> {
    this._forced = false;
    let response: IHostsResponse;
    try {
      response = await this._fetch();
    } catch (reason) {
      const error = toAPIError(reason);
      this._setState({
        status: 'error',
        hosts: error.hosts,
        error,
        lastUpdated: new Date()
      });
      // Rejecting makes the poll back off until the server answers again.
      throw error;
    }
    this._setState({
      status: 'ready',
      hosts: response.hosts,
      error: null,
      lastUpdated: new Date()
    });
  }

  private _setState(state: IHostsState): void {
    if (this.isDisposed) {
      return;
    }
    this._state = state;
    this._stateChanged.emit(state);
  }

  private readonly _fetch: () => Promise<IHostsResponse>;
  private readonly _poll: Poll<void, GPUDevAPIError>;
  private readonly _stateChanged = new Signal<this, IHostsState>(this);
  private _state: IHostsState = {
    status: 'loading',
    hosts: [],
    error: null,
    lastUpdated: null
  };
  private _visible = false;
  private _forced = false;
  private _isDisposed = false;
}

export namespace HostsModel {
  export interface IOptions {
    /** The server connection; defaults to the page's. */
    serverSettings?: ServerConnection.ISettings;
    /** Time between two refreshes in milliseconds; default 5000. */
    interval?: number;
    /** Start polling at once (default true). */
    auto?: boolean;
    /** Replaces the API call, for tests. */
    fetchHosts?: () => Promise<IHostsResponse>;
  }
}

function clampInterval(ms: number): number {
  return Number.isFinite(ms)
    ? Math.max(1000, Math.round(ms))
    : DEFAULT_INTERVAL_MS;
}
