/**
 * The state plumbing every model of the extension shares: an immutable
 * state replaced (never mutated) on each change and announced by a signal,
 * a refresh, a dispose after which nothing changes any more, and the
 * errors of actions refused while another one runs.
 */
import type { IDisposable } from '@lumino/disposable';
import { Signal } from '@lumino/signaling';
import type { ISignal } from '@lumino/signaling';

import { busyError } from '../api/errors';

/** A model whose state is replaced, and announced, on each change. */
export interface IStateModel<S> {
  readonly state: S;
  readonly stateChanged: ISignal<unknown, S>;
}

/** The base of the models: state, `stateChanged`, `refresh`, `dispose`. */
export abstract class StateModel<S extends object>
  implements IStateModel<S>, IDisposable
{
  constructor(initial: S) {
    this._state = initial;
  }

  /** The current state; replaced (never mutated) on each change. */
  get state(): S {
    return this._state;
  }

  /** Emitted with the new state each time it changes. */
  get stateChanged(): ISignal<this, S> {
    return this._stateChanged;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /**
   * Ask the server again. The returned promise resolves once the answer
   * has been applied to `state` (failures land in `state`).
   */
  abstract refresh(): Promise<void>;

  /** Stop: no more requests, no more state changes, no more signals. */
  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this.onDispose();
    Signal.clearData(this);
  }

  /** Release what the model holds (timers, polls, connections). */
  protected onDispose(): void {
    // Nothing by default.
  }

  /** Replace the state and announce it; nothing once disposed. */
  protected setState(state: S): void {
    if (this._isDisposed) {
      return;
    }
    this._state = state;
    this._stateChanged.emit(state);
  }

  /** Change some fields of the state (see `setState`). */
  protected patch(change: Partial<S>): void {
    this.setState({ ...this._state, ...change });
  }

  /**
   * Run `action` unless `isBusy`: then reject with a `busy` error saying
   * `busyMessage`, without running it.
   */
  protected async unlessBusy<T>(
    isBusy: boolean,
    busyMessage: string,
    action: () => Promise<T>
  ): Promise<T> {
    if (isBusy) {
      throw busyError(busyMessage);
    }
    return action();
  }

  private readonly _stateChanged = new Signal<this, S>(this);
  private _state: S;
  private _isDisposed = false;
}

/** A copy of `map` with `key` set to `value`, or removed when it is `null`. */
export function withEntry<K, V>(
  map: ReadonlyMap<K, V>,
  key: K,
  value: V | null
): Map<K, V> {
  const copy = new Map(map);
  if (value === null) {
    copy.delete(key);
  } else {
    copy.set(key, value);
  }
  return copy;
}
