import type { ServerConnection } from '@jupyterlab/services';
import { Poll } from '@lumino/polling';
import { Signal } from '@lumino/signaling';
import type { ISignal } from '@lumino/signaling';

import {
  addHost,
  addWebPort,
  commitContainer,
  fetchDiff,
  fetchContainers,
  fetchEnvironments,
  fetchHosts,
  fetchReclaims,
  GPUDevAPIError,
  keepKernel,
  openContainerTerminal,
  pinContainer,
  releaseKernel,
  removeContainer,
  removeHost,
  removeWebPort,
  resumeContainer,
  startContainer,
  stopContainer,
  stringArray,
  toAPIError
} from './api';
import type { IStartOptions } from './api';
import type {
  IAddHostRequest,
  ICommitProgress,
  ICommitRequest,
  ICommitResult,
  IContainerDiff,
  IContainerTerminal,
  IContainersResponse,
  IDevContainer,
  IEnvironment,
  IEnvironmentProblem,
  IEnvironmentsResponse,
  IGPULease,
  IHostInfo,
  IHostsResponse,
  IReclaim,
  IReclaimsResponse,
  IStartProgress,
  IStartRequest
} from './tokens';

/** Default time between two refreshes of the host list, in milliseconds. */
export const DEFAULT_INTERVAL_MS = 5000;

/** Time between two looks at the pending GPU reclaims, in milliseconds. */
export const RECLAIMS_INTERVAL_MS = 10000;

/** The longest the poll waits between two attempts while failing, in milliseconds. */
export const MAX_INTERVAL_MS = 60000;

/** What every polled model tells about its last answer. */
export interface IPolledState {
  /** `loading` until the first answer, then `ready` or `error`. */
  readonly status: 'loading' | 'ready' | 'error';
  readonly error: GPUDevAPIError | null;
  /** When the server last answered (successfully or not). */
  readonly lastUpdated: Date | null;
}

/** What the panel shows. */
export interface IHostsState extends IPolledState {
  /**
   * The hosts of the last answer. In `error` they are the hosts the server
   * listed with the error (with the reason each one is unreachable), if any.
   */
  readonly hosts: readonly IHostInfo[];
  /** Actions under way, by host name. */
  readonly pending: ReadonlyMap<string, HostAction>;
}

/** An action on a host that can be under way. */
export type HostAction = 'add' | 'remove';

/**
 * State refreshed by a poll.
 *
 * The poll backs off while requests fail and stands by while the panel is
 * hidden (`visible` is false, unless `pausesWhenHidden` says otherwise) or
 * the browser tab is in the background.
 */
abstract class PolledModel<S extends IPolledState> {
  constructor(name: string, options: PolledModel.IOptions, initial: S) {
    this._state = initial;
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

  /** The current state; replaced (never mutated) on each change. */
  get state(): S {
    return this._state;
  }

  /** Emitted with the new state each time it changes. */
  get stateChanged(): ISignal<this, S> {
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

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._poll.dispose();
    Signal.clearData(this);
  }

  /**
   * Whether the poll stands by while the panel is hidden (it always does
   * while the browser tab is in the background). A model whose answers
   * matter when the user is elsewhere returns false.
   */
  protected get pausesWhenHidden(): boolean {
    return true;
  }

  /**
   * Ask the server and apply its answer with `setState`. Reject (after
   * applying the error) to make the poll back off.
   */
  protected abstract update(): Promise<void>;

  /**
   * Apply a failed update: `status` becomes `error` (with `extra`, the rest
   * of the state kept), then throw the error so that the poll backs off
   * until the server answers again.
   */
  protected fail(reason: unknown, extra: Partial<S> = {}): never {
    const error = toAPIError(reason);
    this.setState({
      ...this.state,
      ...extra,
      status: 'error',
      error,
      lastUpdated: new Date()
    });
    throw error;
  }

  protected setState(state: S): void {
    if (this.isDisposed) {
      return;
    }
    this._state = state;
    this._stateChanged.emit(state);
  }

  private async _run(): Promise<void> {
    this._forced = false;
    try {
      await this.update();
    } finally {
      if (!this.isDisposed) {
        this._answered.emit();
      }
    }
  }

  private readonly _poll: Poll<void, GPUDevAPIError>;
  private readonly _stateChanged = new Signal<this, S>(this);
  private readonly _answered = new Signal<this, void>(this);
  private _state: S;
  private _visible = false;
  private _forced = false;
  private _isDisposed = false;
}

namespace PolledModel {
  export interface IOptions {
    /** Time between two refreshes in milliseconds; default 5000. */
    interval?: number;
    /** Start polling at once (default true). */
    auto?: boolean;
  }
}

/**
 * The list of Docker hosts, refreshed by a poll, and the hosts added or
 * removed from the panel.
 *
 * Actions reject with a `GPUDevAPIError`; the list is refreshed after each.
 */
export class HostsModel extends PolledModel<IHostsState> {
  constructor(options: HostsModel.IOptions = {}) {
    super('jupyter-gpudev:hosts', options, {
      status: 'loading',
      hosts: [],
      error: null,
      lastUpdated: null,
      pending: new Map()
    });
    const settings = options.serverSettings;
    this._api = {
      fetchHosts: options.fetchHosts ?? (() => fetchHosts(settings)),
      addHost: request => addHost(request, settings),
      removeHost: name => removeHost(name, settings),
      ...options.api
    };
  }

  /**
   * Add a remote host. The server connects to it first (unless `check` is
   * false), which can take seconds. Resolves with the new host once the
   * list shows it.
   */
  async add(request: IAddHostRequest): Promise<IHostInfo> {
    return this._act(request.name, 'add', async () => {
      const host = await this._api.addHost(request);
      // Shown at once, then as the refresh below describes it.
      this.setState({
        ...this.state,
        hosts: [...this.state.hosts.filter(h => h.name !== host.name), host]
      });
      return host;
    });
  }

  /**
   * Remove a host added with `add`. A host of the configuration is refused
   * with a 400, one with dev containers left on it with a 409.
   */
  async remove(name: string): Promise<void> {
    return this._act(name, 'remove', async () => {
      await this._api.removeHost(name);
      this.setState({
        ...this.state,
        hosts: this.state.hosts.filter(h => h.name !== name)
      });
    });
  }

  protected async update(): Promise<void> {
    let response: IHostsResponse;
    try {
      let epoch: number;
      do {
        // A host added or removed meanwhile may have made the answer
        // outdated: ask again then.
        epoch = this._epoch;
        response = await this._api.fetchHosts();
      } while (epoch !== this._epoch && !this.isDisposed);
    } catch (reason) {
      const error = toAPIError(reason);
      this.fail(error, { hosts: error.hosts });
    }
    this.setState({
      ...this.state,
      status: 'ready',
      hosts: response.hosts,
      error: null,
      lastUpdated: new Date()
    });
  }

  private async _act<T>(
    name: string,
    action: HostAction,
    run: () => Promise<T>
  ): Promise<T> {
    if (this.state.pending.has(name)) {
      throw new GPUDevAPIError({
        status: 0,
        code: 'busy',
        message: `Host "${name}" is busy with another action.`
      });
    }
    // A list asked for before the change is outdated once it answers.
    this._epoch += 1;
    this.setState({
      ...this.state,
      pending: withEntry(this.state.pending, name, action)
    });
    try {
      // `run` shows the change from the server's answer at once.
      return await run();
    } catch (reason) {
      throw toAPIError(reason);
    } finally {
      this.setState({
        ...this.state,
        pending: withEntry(this.state.pending, name, null)
      });
      // Then the list is asked again (not waited for: with an unreachable
      // host among them it can take seconds).
      this._epoch += 1;
      void this.refresh();
    }
  }

  private readonly _api: HostsModel.IAPI;
  private _epoch = 0;
}

export namespace HostsModel {
  /** The calls the model makes; each can be replaced, for tests. */
  export interface IAPI {
    fetchHosts: () => Promise<IHostsResponse>;
    addHost: (request: IAddHostRequest) => Promise<IHostInfo>;
    removeHost: (name: string) => Promise<void>;
  }

  export interface IOptions extends PolledModel.IOptions {
    /** The server connection; defaults to the page's. */
    serverSettings?: ServerConnection.ISettings;
    /** Replaces the API call, for tests (`api.fetchHosts` wins over it). */
    fetchHosts?: () => Promise<IHostsResponse>;
    /** Replaces some API calls, for tests. */
    api?: Partial<IAPI>;
  }
}

/** An action on a dev container that can be under way. */
export type ContainerAction =
  | 'stop'
  | 'start'
  | 'remove'
  | 'terminal'
  | 'pin'
  | 'unpin'
  | 'add-port'
  | 'remove-port';

/** A start under way. */
export interface IStartState {
  readonly request: IStartRequest;
  /** The last progress event; `null` until the first one. */
  readonly progress: IStartProgress | null;
}

/** What the Environments and Dev containers sections show. */
export interface IContainersState extends IPolledState {
  readonly environments: readonly IEnvironment[];
  /** Environment definitions that could not be used, with why. */
  readonly problems: readonly IEnvironmentProblem[];
  /** Every dev container, stopped ones included, by host then name. */
  readonly containers: readonly IDevContainer[];
  /** Starts under way, by environment name. */
  readonly starting: ReadonlyMap<string, IStartState>;
  /** Actions under way, by container name. */
  readonly pending: ReadonlyMap<string, ContainerAction>;
}

/**
 * The environments and the dev containers, refreshed by a poll with the
 * same rules as the hosts, and the actions on them.
 *
 * Actions reject with a `GPUDevAPIError`; the list is refreshed after each.
 */
export class ContainersModel extends PolledModel<IContainersState> {
  constructor(options: ContainersModel.IOptions = {}) {
    super('jupyter-gpudev:containers', options, {
      status: 'loading',
      environments: [],
      problems: [],
      containers: [],
      error: null,
      lastUpdated: null,
      starting: new Map(),
      pending: new Map()
    });
    const settings = options.serverSettings;
    this._api = {
      fetchEnvironments: () => fetchEnvironments(settings),
      fetchContainers: () => fetchContainers(settings),
      startContainer: (request, startOptions) =>
        startContainer(request, { settings, ...startOptions }),
      stopContainer: name => stopContainer(name, settings),
      resumeContainer: name => resumeContainer(name, settings),
      pinContainer: (name, pinned) => pinContainer(name, pinned, settings),
      removeContainer: (name, force) => removeContainer(name, force, settings),
      openContainerTerminal: name => openContainerTerminal(name, settings),
      addWebPort: (name, port) => addWebPort(name, port, settings),
      removeWebPort: (name, port) => removeWebPort(name, port, settings),
      ...options.api
    };
  }

  /**
   * Start a dev container from an environment, following its progress in
   * `state.starting`. Resolves with the running container.
   */
  async start(request: IStartRequest): Promise<IDevContainer> {
    const environment = request.environment;
    if (this.state.starting.has(environment)) {
      throw new GPUDevAPIError({
        status: 0,
        code: 'busy',
        message: `A dev container of "${environment}" is already starting.`
      });
    }
    this._setStarting(environment, { request, progress: null });
    try {
      const container = await this._api.startContainer(request, {
        onProgress: progress => {
          if (this.state.starting.has(environment)) {
            this._setStarting(environment, { request, progress });
          }
        }
      });
      if (container.warnings.length > 0) {
        this._warnings.set(container.name, container.warnings);
      }
      this._replace(container);
      return container;
    } catch (reason) {
      throw toAPIError(reason);
    } finally {
      this._setStarting(environment, null);
      this._changed();
    }
  }

  /** Stop a running container; its GPU lease is freed. */
  async stop(name: string): Promise<IDevContainer> {
    return this._act(name, 'stop', async () => {
      const container = await this._api.stopContainer(name);
      this._replace(container);
      return container;
    });
  }

  /** Start a stopped container again, with the GPUs it had. */
  async resume(name: string): Promise<IDevContainer> {
    return this._act(name, 'start', async () => {
      const container = await this._api.resumeContainer(name);
      this._replace(container);
      return container;
    });
  }

  /**
   * Pin a shared container (`kernel_id` null), so it keeps running with its
   * GPUs after its last kernel ends, or unpin it (`pinned` false), so it
   * stops then. A container made for one kernel is refused with a 400.
   */
  async pin(name: string, pinned: boolean): Promise<IDevContainer> {
    return this._act(name, pinned ? 'pin' : 'unpin', async () => {
      const container = await this._api.pinContainer(name, pinned);
      this._replace(container);
      return container;
    });
  }

  /**
   * Remove a container. Without `force`, one with uncommitted changes is
   * refused with a 409 `conflict` error (see `isUncommittedChanges`).
   */
  async remove(name: string, force = false): Promise<void> {
    return this._act(name, 'remove', async () => {
      await this._api.removeContainer(name, force);
      this._warnings.delete(name);
      this.setState({
        ...this.state,
        containers: this.state.containers.filter(c => c.name !== name)
      });
    });
  }

  /**
   * Serve one more port of a container through the server's proxy; resolves
   * with the container as the server now lists it.
   */
  async addPort(name: string, port: number): Promise<IDevContainer> {
    return this._act(name, 'add-port', async () => {
      const container = await this._api.addWebPort(name, port);
      this._replace(container);
      return container;
    });
  }

  /**
   * Stop serving a port added at run time (the server keeps serving the
   * environment's forwardPorts); resolves with the container as the server
   * now lists it.
   */
  async removePort(name: string, port: number): Promise<IDevContainer> {
    return this._act(name, 'remove-port', async () => {
      const container = await this._api.removeWebPort(name, port);
      this._replace(container);
      return container;
    });
  }

  /**
   * Make a Jupyter terminal whose shell runs inside a running container.
   * Resolves with the terminal's name, to open with `terminal:open`.
   */
  async terminal(name: string): Promise<string> {
    return this._act(name, 'terminal', async () => {
      const terminal = await this._api.openContainerTerminal(name);
      return terminal.name;
    });
  }

  protected async update(): Promise<void> {
    let environments: IEnvironmentsResponse;
    let containers: IContainersResponse;
    try {
      let epoch: number;
      do {
        // An action that ends meanwhile may have made the answer outdated:
        // ask again then.
        epoch = this._epoch;
        [environments, containers] = await Promise.all([
          this._api.fetchEnvironments(),
          this._api.fetchContainers()
        ]);
      } while (epoch !== this._epoch && !this.isDisposed);
    } catch (reason) {
      // Keep the last lists: they are shown greyed out under the error.
      this.fail(reason);
    }
    const names = new Set(containers.containers.map(c => c.name));
    for (const name of [...this._warnings.keys()]) {
      if (!names.has(name)) {
        this._warnings.delete(name);
      }
    }
    this.setState({
      ...this.state,
      status: 'ready',
      environments: environments.environments,
      problems: environments.problems,
      containers: containers.containers.map(c => this._withWarnings(c)),
      error: null,
      lastUpdated: new Date()
    });
  }

  private async _act<T>(
    name: string,
    action: ContainerAction,
    run: () => Promise<T>
  ): Promise<T> {
    if (this.state.pending.has(name)) {
      throw new GPUDevAPIError({
        status: 0,
        code: 'busy',
        message: `"${name}" is busy with another action.`
      });
    }
    this._setPending(name, action);
    try {
      return await run();
    } catch (reason) {
      throw toAPIError(reason);
    } finally {
      this._setPending(name, null);
      this._changed();
    }
  }

  /** Make answers asked before now outdated, and ask again. */
  private _changed(): void {
    this._epoch += 1;
    void this.refresh();
  }

  /** Show the container as the server just described it. */
  private _replace(container: IDevContainer): void {
    const previous = this.state.containers.find(c => c.name === container.name);
    // An action's answer may not have counted the changes (`null`): keep the
    // last count rather than show a container with changes as clean.
    const next = this._withWarnings(
      container.uncommitted === null && previous
        ? { ...container, uncommitted: previous.uncommitted }
        : container
    );
    const found = previous !== undefined;
    this.setState({
      ...this.state,
      containers: found
        ? this.state.containers.map(c => (c.name === next.name ? next : c))
        : [...this.state.containers, next]
    });
  }

  /**
   * The list does not repeat the warnings of a start (e.g. "started without
   * a GPU"): keep showing them while the container exists.
   */
  private _withWarnings(container: IDevContainer): IDevContainer {
    const kept = this._warnings.get(container.name);
    return kept && container.warnings.length === 0
      ? { ...container, warnings: kept }
      : container;
  }

  private _setStarting(environment: string, value: IStartState | null): void {
    this.setState({
      ...this.state,
      starting: withEntry(this.state.starting, environment, value)
    });
  }

  private _setPending(name: string, action: ContainerAction | null): void {
    this.setState({
      ...this.state,
      pending: withEntry(this.state.pending, name, action)
    });
  }

  private readonly _api: ContainersModel.IAPI;
  private readonly _warnings = new Map<string, string[]>();
  private _epoch = 0;
}

export namespace ContainersModel {
  /** The calls the model makes; each can be replaced, for tests. */
  export interface IAPI {
    fetchEnvironments: () => Promise<IEnvironmentsResponse>;
    fetchContainers: () => Promise<IContainersResponse>;
    startContainer: (
      request: IStartRequest,
      options: Pick<IStartOptions, 'onProgress' | 'signal'>
    ) => Promise<IDevContainer>;
    stopContainer: (name: string) => Promise<IDevContainer>;
    resumeContainer: (name: string) => Promise<IDevContainer>;
    pinContainer: (name: string, pinned: boolean) => Promise<IDevContainer>;
    removeContainer: (name: string, force: boolean) => Promise<void>;
    openContainerTerminal: (name: string) => Promise<IContainerTerminal>;
    addWebPort: (name: string, port: number) => Promise<IDevContainer>;
    removeWebPort: (name: string, port: number) => Promise<IDevContainer>;
  }

  export interface IOptions extends PolledModel.IOptions {
    /** The server connection; defaults to the page's. */
    serverSettings?: ServerConnection.ISettings;
    /** Replaces some API calls, for tests. */
    api?: Partial<IAPI>;
  }
}

/**
 * True for the refusal to remove a container with uncommitted changes
 * (409 `conflict`); `force` removes it anyway.
 */
export function isUncommittedChanges(error: GPUDevAPIError): boolean {
  return error.status === 409 && error.code === 'conflict';
}

/** The changed paths listed with an `isUncommittedChanges` error. */
export function changedPaths(error: GPUDevAPIError): string[] {
  return stringArray(error.details?.changes);
}

/** An action on a pending reclaim that can be under way. */
export type ReclaimAction = 'keep' | 'release';

/** The GPU kernels about to be shut down for idleness. */
export interface IReclaimsState extends IPolledState {
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
}

/**
 * The GPU kernels the server will shut down for idleness unless they are
 * used or kept, refreshed by a poll, and the actions on them.
 *
 * Unlike the other models it keeps polling while the panel is hidden: the
 * warning matters most when the user is elsewhere. It still stands by while
 * the browser tab is in the background.
 *
 * Actions reject with a `GPUDevAPIError`; the list is refreshed after each.
 */
export class ReclaimsModel extends PolledModel<IReclaimsState> {
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
        pending: new Map()
      }
    );
    const settings = options.serverSettings;
    this._api = {
      fetchReclaims: () => fetchReclaims(settings),
      keepKernel: kernelId => keepKernel(kernelId, settings),
      releaseKernel: kernelId => releaseKernel(kernelId, settings),
      ...options.api
    };
  }

  /** Keep an idle GPU kernel: its idle time starts again. */
  async keep(kernelId: string): Promise<void> {
    return this._act(kernelId, 'keep', () => this._api.keepKernel(kernelId));
  }

  /** Shut an idle GPU kernel down now; its container is stopped and kept. */
  async release(kernelId: string): Promise<void> {
    return this._act(kernelId, 'release', () =>
      this._api.releaseKernel(kernelId)
    );
  }

  protected override get pausesWhenHidden(): boolean {
    return false;
  }

  protected async update(): Promise<void> {
    let response: IReclaimsResponse;
    try {
      let epoch: number;
      do {
        // An action that ends meanwhile may have made the answer outdated
        // (a kept kernel still listed): ask again then.
        epoch = this._epoch;
        response = await this._api.fetchReclaims();
      } while (epoch !== this._epoch && !this.isDisposed);
    } catch (reason) {
      this.fail(reason);
    }
    this.setState({
      ...this.state,
      status: 'ready',
      reclaims: response.reclaims,
      idleTimeout: response.idle_timeout,
      warningSeconds: response.warning_seconds,
      error: null,
      lastUpdated: new Date()
    });
  }

  private async _act(
    kernelId: string,
    action: ReclaimAction,
    run: () => Promise<void>
  ): Promise<void> {
    if (this.state.pending.has(kernelId)) {
      throw new GPUDevAPIError({
        status: 0,
        code: 'busy',
        message: `The kernel ${kernelId} is busy with another action.`
      });
    }
    this._setPending(kernelId, action);
    try {
      await run();
      // Done: the server no longer lists it.
      this.setState({
        ...this.state,
        reclaims: this.state.reclaims.filter(r => r.kernel_id !== kernelId)
      });
    } catch (reason) {
      throw toAPIError(reason);
    } finally {
      this._setPending(kernelId, null);
      this._epoch += 1;
      void this.refresh();
    }
  }

  private _setPending(kernelId: string, action: ReclaimAction | null): void {
    this.setState({
      ...this.state,
      pending: withEntry(this.state.pending, kernelId, action)
    });
  }

  private readonly _api: ReclaimsModel.IAPI;
  private _epoch = 0;
}

export namespace ReclaimsModel {
  /** The calls the model makes; each can be replaced, for tests. */
  export interface IAPI {
    fetchReclaims: () => Promise<IReclaimsResponse>;
    keepKernel: (kernelId: string) => Promise<void>;
    releaseKernel: (kernelId: string) => Promise<void>;
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
export class CommitModel {
  constructor(options: CommitModel.IOptions) {
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

  get state(): ICommitState {
    return this._state;
  }

  get stateChanged(): ISignal<this, ICommitState> {
    return this._stateChanged;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  /** Read the diff again with the current selection. */
  async refresh(): Promise<void> {
    if (this._isDisposed || this._state.status === 'committing') {
      return;
    }
    window.clearTimeout(this._timer);
    this._reading?.abort();
    const reading = new AbortController();
    this._reading = reading;
    const excluded = [...this._state.excluded].sort();
    this._set({ refreshing: true, current: false });
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
      this._set({
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
      this._set({
        status: this._state.diff ? 'ready' : 'error',
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
    const excluded = new Set(this._state.excluded);
    if (included) {
      excluded.delete(id);
    } else {
      excluded.add(id);
    }
    this._select(excluded);
  }

  /** Carry every change, or none. */
  setAllIncluded(included: boolean): void {
    const items = this._state.diff?.items ?? [];
    this._select(new Set(included ? [] : items.map(item => item.id)));
  }

  /**
   * Whether the commit can run now: a current diff with something to do.
   * Only a snapshot (or a push) may run with no Dockerfile change.
   */
  canCommit(choices: ICommitChoices): boolean {
    const { status, diff, refreshing, current } = this._state;
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
    const diff = this._state.diff;
    if (!this.canCommit(choices) || !diff) {
      throw new GPUDevAPIError({
        status: 0,
        code: 'busy',
        message: `The commit of "${this.name}" cannot run now.`
      });
    }
    const request: ICommitRequest = {
      write: choices.write && !diff.empty,
      verify: choices.verify && !diff.empty,
      exclude: [...this._state.excluded].sort(),
      expect: diff.digest
    };
    if (choices.snapshot.trim()) {
      request.snapshot = choices.snapshot.trim();
      request.push = choices.push;
    }
    if (choices.message.trim()) {
      request.message = choices.message.trim();
    }
    this._set({
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
      this._set({ status: 'ready', result, current: false });
      void this.refresh();
      return result;
    } catch (reason) {
      const error = toAPIError(reason);
      this._set({ status: 'ready', error });
      if (error.code === 'diff_changed') {
        // Show what the commit would carry now.
        void this.refresh();
      }
      throw error;
    }
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    window.clearTimeout(this._timer);
    this._reading?.abort();
    Signal.clearData(this);
  }

  private _select(excluded: Set<string>): void {
    if (this._state.status === 'committing') {
      return;
    }
    // The diff being read is for the old selection: drop it.
    this._reading?.abort();
    this._set({ excluded, refreshing: true, current: false });
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
      ? this._state.log
      : [...this._state.log, progress.message].slice(-COMMIT_LOG_LINES);
    this._set({ progress, log });
  }

  private _set(change: Partial<ICommitState>): void {
    if (this._isDisposed) {
      return;
    }
    this._state = { ...this._state, ...change };
    this._stateChanged.emit(this._state);
  }

  private readonly _api: CommitModel.IAPI;
  private readonly _debounce: number;
  private readonly _stateChanged = new Signal<this, ICommitState>(this);
  private _state: ICommitState = {
    status: 'loading',
    diff: null,
    refreshing: false,
    current: false,
    excluded: new Set(),
    error: null,
    progress: null,
    log: [],
    result: null
  };
  private _reading: AbortController | null = null;
  private _timer = 0;
  private _isDisposed = false;
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

/** The lease holding each leased GPU (or MIG instance) UUID of a host. */
export function leasesByGPU(
  leases: readonly IGPULease[]
): Map<string, IGPULease> {
  const byUUID = new Map<string, IGPULease>();
  for (const lease of leases) {
    for (const uuid of lease.gpu_uuids) {
      byUUID.set(uuid, lease);
    }
  }
  return byUUID;
}

/** A copy of `map` with `key` set to `value`, or removed when it is `null`. */
function withEntry<K, V>(
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

function clampInterval(ms: number): number {
  return Number.isFinite(ms)
    ? Math.max(1000, Math.round(ms))
    : DEFAULT_INTERVAL_MS;
}
