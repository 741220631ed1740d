import type { ServerConnection } from '@jupyterlab/services';

import { commitContainer, fetchDiff } from '../api/commit';
import { busyError, toAPIError } from '../api/errors';
import type { GPUDevAPIError } from '../api/errors';
import type {
  ICommitProgress,
  ICommitRequest,
  ICommitResult,
  IContainerDiff
} from '../types';
import { StateModel } from './state';

/** The options of a commit the dialog lets the user set. */
export interface ICommitChoices {
  write: boolean;
  verify: boolean;
  /** The image tag of a snapshot; empty for none. */
  snapshot: string;
  push: boolean;
  message: string;
}

/** What the commit dialog shows. */
export interface ICommitState {
  /**
   * `loading` until the first diff, `ready` to commit, `error` when no diff
   * could be read, `committing` while a commit runs.
   */
  readonly status: 'loading' | 'ready' | 'error' | 'committing';
  /** The last diff read; `null` until the first one. */
  readonly diff: IContainerDiff | null;
  /** Whether a newer diff is being read (the shown one is then outdated). */
  readonly refreshing: boolean;
  /**
   * Whether `diff` is the diff of the current selection, as read last: only
   * then can a commit run (it names that diff's digest).
   */
  readonly current: boolean;
  /** The ids of the changes left out. */
  readonly excluded: ReadonlySet<string>;
  /** Why the last diff or commit failed. */
  readonly error: GPUDevAPIError | null;
  /** The last progress event of a commit, for its bar. */
  readonly progress: ICommitProgress | null;
  /** The progress messages of the commit so far (the build's lines too). */
  readonly log: readonly string[];
  /** The outcome of the last commit, if one ran. */
  readonly result: ICommitResult | null;
}

/** How many progress lines the commit dialog keeps. */
export const COMMIT_LOG_LINES = 500;

/**
 * The state of a commit dialog of one dev container: its diff, re-read
 * whenever the selection of changes moves, then the commit and its progress.
 *
 * The commit names the digest of the diff the user saw: if the container's
 * changes moved meanwhile the server refuses it (409 `diff_changed`) and the
 * dialog reads the diff again.
 */
export class CommitModel extends StateModel<ICommitState> {
  constructor(options: CommitModel.IOptions) {
    super({
      status: 'loading',
      diff: null,
      refreshing: false,
      current: false,
      excluded: new Set(),
      error: null,
      progress: null,
      log: [],
      result: null
    });
    this.name = options.name;
    const settings = options.serverSettings;
    this._api = {
      fetchDiff: (name, exclude, signal) =>
        fetchDiff(name, exclude, settings, signal),
      commitContainer: (name, request, onProgress) =>
        commitContainer(name, request, { settings, onProgress }),
      ...options.api
    };
    this._debounce = options.debounce ?? 250;
  }

  /** The dev container the dialog commits. */
  readonly name: string;

  /** Read the diff again with the current selection. */
  async refresh(): Promise<void> {
    if (this.isDisposed || this.state.status === 'committing') {
      return;
    }
    window.clearTimeout(this._timer);
    this._reading?.abort();
    const reading = new AbortController();
    this._reading = reading;
    const excluded = [...this.state.excluded].sort();
    this.patch({ refreshing: true, current: false });
    try {
      const diff = await this._api.fetchDiff(
        this.name,
        excluded,
        reading.signal
      );
      // A newer selection aborted this read (and reads its own diff).
      if (reading.signal.aborted) {
        return;
      }
      // A change that went away is no longer left out.
      const ids = new Set(diff.items.map(item => item.id));
      const kept = new Set(excluded.filter(id => ids.has(id)));
      this.patch({
        status: 'ready',
        diff,
        excluded: kept,
        refreshing: false,
        current: true,
        error: null
      });
    } catch (reason) {
      if (reading.signal.aborted) {
        return;
      }
      // The shown diff (if any) stays, marked as not the selection's.
      this.patch({
        status: this.state.diff ? 'ready' : 'error',
        refreshing: false,
        current: false,
        error: toAPIError(reason)
      });
    } finally {
      if (this._reading === reading) {
        this._reading = null;
      }
    }
  }

  /** Carry (`included` true) or leave out one change; the diff follows. */
  setIncluded(id: string, included: boolean): void {
    const excluded = new Set(this.state.excluded);
    if (included) {
      excluded.delete(id);
    } else {
      excluded.add(id);
    }
    this._select(excluded);
  }

  /** Carry every change, or none. */
  setAllIncluded(included: boolean): void {
    const items = this.state.diff?.items ?? [];
    this._select(new Set(included ? [] : items.map(item => item.id)));
  }

  /**
   * Whether the commit can run now: a current diff with something to do.
   * Only a snapshot (or a push) may run with no Dockerfile change.
   */
  canCommit(choices: ICommitChoices): boolean {
    const { status, diff, refreshing, current } = this.state;
    if (status !== 'ready' || !diff || refreshing || !current) {
      return false;
    }
    if (choices.push && !choices.snapshot.trim()) {
      return false;
    }
    const writes = (choices.write || choices.verify) && !diff.empty;
    return writes || choices.snapshot.trim() !== '';
  }

  /**
   * Commit with `choices` and the current selection, following its progress.
   * Resolves with the result; rejects with a `GPUDevAPIError` (the state has
   * it too).
   */
  async commit(choices: ICommitChoices): Promise<ICommitResult> {
    const diff = this.state.diff;
    if (!this.canCommit(choices) || !diff) {
      throw busyError(`The commit of "${this.name}" cannot run now.`);
    }
    const request: ICommitRequest = {
      write: choices.write && !diff.empty,
      verify: choices.verify && !diff.empty,
      exclude: [...this.state.excluded].sort(),
      expect: diff.digest
    };
    if (choices.snapshot.trim()) {
      request.snapshot = choices.snapshot.trim();
      request.push = choices.push;
    }
    if (choices.message.trim()) {
      request.message = choices.message.trim();
    }
    this.patch({
      status: 'committing',
      error: null,
      progress: null,
      log: [],
      result: null
    });
    try {
      const result = await this._api.commitContainer(
        this.name,
        request,
        progress => {
          this._onProgress(progress);
        }
      );
      // Shown with the outcome; the diff is read again: what is left to commit.
      this.patch({ status: 'ready', result, current: false });
      void this.refresh();
      return result;
    } catch (reason) {
      const error = toAPIError(reason);
      this.patch({ status: 'ready', error });
      if (error.code === 'diff_changed') {
        // Show what the commit would carry now.
        void this.refresh();
      }
      throw error;
    }
  }

  protected override onDispose(): void {
    window.clearTimeout(this._timer);
    this._reading?.abort();
  }

  private _select(excluded: Set<string>): void {
    if (this.state.status === 'committing') {
      return;
    }
    // The diff being read is for the old selection: drop it.
    this._reading?.abort();
    this.patch({ excluded, refreshing: true, current: false });
    // One request for a burst of clicks.
    window.clearTimeout(this._timer);
    this._timer = window.setTimeout(() => {
      void this.refresh();
    }, this._debounce);
  }

  private _onProgress(progress: ICommitProgress): void {
    // Layer-by-layer push events move the bar; other events are lines.
    const measured = progress.current !== null && progress.total !== null;
    const log = measured
      ? this.state.log
      : [...this.state.log, progress.message].slice(-COMMIT_LOG_LINES);
    this.patch({ progress, log });
  }

  private readonly _api: CommitModel.IAPI;
  private readonly _debounce: number;
  private _reading: AbortController | null = null;
  private _timer = 0;
}

export namespace CommitModel {
  /** The calls the model makes; each can be replaced, for tests. */
  export interface IAPI {
    fetchDiff: (
      name: string,
      exclude: string[],
      signal: AbortSignal
    ) => Promise<IContainerDiff>;
    commitContainer: (
      name: string,
      request: ICommitRequest,
      onProgress: (progress: ICommitProgress) => void
    ) => Promise<ICommitResult>;
  }

  export interface IOptions {
    /** The dev container to commit. */
    name: string;
    /** The server connection; defaults to the page's. */
    serverSettings?: ServerConnection.ISettings;
    /** Milliseconds to wait after a selection change before reading the diff. */
    debounce?: number;
    /** Replaces some API calls, for tests. */
    api?: Partial<IAPI>;
  }
}
