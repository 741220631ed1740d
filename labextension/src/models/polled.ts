import { Poll } from '@lumino/polling';
import { Signal } from '@lumino/signaling';

import { toAPIError } from '../api/errors';
import type { GPUDevAPIError } from '../api/errors';
import { DEFAULT_INTERVAL_MS, MAX_INTERVAL_MS } from '../constants';
import { StateModel, withEntry } from './state';

/** What every polled model tells about its last answer. */
export interface IPolledState {
  /** `loading` until the first answer, then `ready` or `error`. */
  readonly status: 'loading' | 'ready' | 'error';
  readonly error: GPUDevAPIError | null;
  /** When the server last answered (successfully or not). */
  readonly lastUpdated: Date | null;
}

/** A polled state with actions under way, by the name of what they act on. */
export interface IActionsState<A extends string> extends IPolledState {
  readonly pending: ReadonlyMap<string, A>;
}

/**
 * State refreshed by a poll: each answer of `load` is applied with
 * `applyAnswer`, a failure makes `status` `error` (see `failedState`) and
 * the poll back off until the server answers again.
 *
 * The poll stands by while the panel is hidden (`visible` is false, unless
 * `pausesWhenHidden` says otherwise) or the browser tab is in the
 * background.
 *
 * Actions (`act`) run one at a time per name, are listed in
 * `state.pending`, reject with a `GPUDevAPIError` and refresh the state
 * after they end.
 */
export abstract class PolledModel<
  S extends IActionsState<A>,
  R,
  A extends string = string
> extends StateModel<S> {
  constructor(name: string, options: PolledModel.IOptions, initial: S) {
    super(initial);
    this._poll = new Poll<void, GPUDevAPIError>({
      auto: options.auto ?? true,
      factory: () => this._run(),
      frequency: {
        interval: clampInterval(options.interval ?? DEFAULT_INTERVAL_MS),
        backoff: true,
        max: MAX_INTERVAL_MS
      },
      name,
      standby: () => {
        if (this._forced) {
          return 'never';
        }
        return this._visible || !this.pausesWhenHidden ? 'when-hidden' : true;
      }
    });
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

  /**
   * Ask the server again now, even while the poll stands by. The returned
   * promise resolves once the answer has been applied to `state` (it never
   * rejects: failures land in `state`).
   */
  async refresh(): Promise<void> {
    if (this.isDisposed) {
      return;
    }
    const answered = new Promise<void>(resolve => {
      const done = (): void => {
        this._answered.disconnect(done);
        this._poll.disposed.disconnect(done);
        resolve();
      };
      this._answered.connect(done);
      this._poll.disposed.connect(done);
    });
    // A refresh asked for by the user runs even if the poll stands by.
    this._forced = true;
    await this._poll.refresh();
    await answered;
  }

  protected override onDispose(): void {
    this._poll.dispose();
  }

  /**
   * Whether the poll stands by while the panel is hidden (it always does
   * while the browser tab is in the background). A model whose answers
   * matter when the user is elsewhere returns false.
   */
  protected get pausesWhenHidden(): boolean {
    return true;
  }

  /** Ask the server; reject to make the poll back off. */
  protected abstract load(): Promise<R>;

  /** The fields of the state an answer of `load` sets. */
  protected abstract applyAnswer(answer: R): Partial<S>;

  /**
   * The fields of the state a failure sets besides `status` and `error`
   * (by default none: the last answer stays shown, greyed out).
   */
  protected failedState(_error: GPUDevAPIError): Partial<S> {
    return {};
  }

  /**
   * Run `run`, the action `action` on `name`, listed in `state.pending`
   * while it runs. Another action on `name` under way refuses it (a `busy`
   * error saying `busyMessage`). Answers asked for before it are outdated
   * (asked again); the state is refreshed after it (not waited for: with an
   * unreachable host that can take seconds).
   */
  protected async act<T>(
    name: string,
    action: A,
    busyMessage: string,
    run: () => Promise<T>
  ): Promise<T> {
    return this.unlessBusy(
      this.state.pending.has(name),
      busyMessage,
      async () => {
        this._epoch += 1;
        this._setPending(name, action);
        try {
          return await run();
        } catch (reason) {
          throw toAPIError(reason);
        } finally {
          this._setPending(name, null);
          this.invalidate();
        }
      }
    );
  }

  /** Make answers asked for before now outdated, and ask again. */
  protected invalidate(): void {
    this._epoch += 1;
    void this.refresh();
  }

  private _setPending(name: string, action: A | null): void {
    this.setState({
      ...this.state,
      pending: withEntry(this.state.pending, name, action)
    });
  }

  /** One attempt of the poll: load, then apply the answer or the failure. */
  private async _run(): Promise<void> {
    this._forced = false;
    try {
      let answer: R;
      try {
        let epoch: number;
        do {
          // An action that ended meanwhile may have made the answer
          // outdated: ask again then.
          epoch = this._epoch;
          answer = await this.load();
        } while (epoch !== this._epoch && !this.isDisposed);
      } catch (reason) {
        const error = toAPIError(reason);
        this.patch({
          ...this.failedState(error),
          status: 'error',
          error,
          lastUpdated: new Date()
        });
        // The poll backs off until the server answers again.
        throw error;
      }
      this.patch({
        ...this.applyAnswer(answer),
        status: 'ready',
        error: null,
        lastUpdated: new Date()
      });
    } finally {
      if (!this.isDisposed) {
        this._answered.emit();
      }
    }
  }

  private readonly _poll: Poll<void, GPUDevAPIError>;
  private readonly _answered = new Signal<this, void>(this);
  private _visible = false;
  private _forced = false;
  private _epoch = 0;
}

export namespace PolledModel {
  export interface IOptions {
    /** Time between two refreshes in milliseconds; default 5000. */
    interval?: number;
    /** Start polling at once (default true). */
    auto?: boolean;
  }
}

function clampInterval(ms: number): number {
  return Number.isFinite(ms)
    ? Math.max(1000, Math.round(ms))
    : DEFAULT_INTERVAL_MS;
}
