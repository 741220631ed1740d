import type { ServerConnection } from '@jupyterlab/services';

import {
  addWebPort,
  fetchContainers,
  fetchEnvironments,
  openContainerTerminal,
  pinContainer,
  removeContainer,
  removeWebPort,
  resumeContainer,
  startContainer,
  stopContainer
} from '../api/containers';
import type { IStartOptions } from '../api/containers';
import { toAPIError } from '../api/errors';
import type { GPUDevAPIError } from '../api/errors';
import { stringArray } from '../api/json';
import type {
  IContainerTerminal,
  IContainersResponse,
  IDevContainer,
  IEnvironment,
  IEnvironmentProblem,
  IEnvironmentsResponse,
  IStartProgress,
  IStartRequest
} from '../types';
import { PolledModel } from './polled';
import type { IActionsState } from './polled';
import { withEntry } from './state';

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
export interface IContainersState extends IActionsState<ContainerAction> {
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

/** One answer of the poll: both lists. */
interface IContainersAnswer {
  environments: IEnvironmentsResponse;
  containers: IContainersResponse;
}

/**
 * The environments and the dev containers, refreshed by a poll with the
 * same rules as the hosts, and the actions on them.
 *
 * Actions reject with a `GPUDevAPIError`; the list is refreshed after each.
 */
export class ContainersModel extends PolledModel<
  IContainersState,
  IContainersAnswer,
  ContainerAction
> {
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
    return this.unlessBusy(
      this.state.starting.has(environment),
      `A dev container of "${environment}" is already starting.`,
      async () => {
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
          this.invalidate();
        }
      }
    );
  }

  /** Stop a running container; its GPU lease is freed. */
  async stop(name: string): Promise<IDevContainer> {
    return this._update(name, 'stop', () => this._api.stopContainer(name));
  }

  /** Start a stopped container again, with the GPUs it had. */
  async resume(name: string): Promise<IDevContainer> {
    return this._update(name, 'start', () => this._api.resumeContainer(name));
  }

  /**
   * Pin a shared container (`kernel_id` null), so it keeps running with its
   * GPUs after its last kernel ends, or unpin it (`pinned` false), so it
   * stops then. A container made for one kernel is refused with a 400.
   */
  async pin(name: string, pinned: boolean): Promise<IDevContainer> {
    return this._update(name, pinned ? 'pin' : 'unpin', () =>
      this._api.pinContainer(name, pinned)
    );
  }

  /**
   * Remove a container. Without `force`, one with uncommitted changes is
   * refused with a 409 `conflict` error (see `isUncommittedChanges`).
   */
  async remove(name: string, force = false): Promise<void> {
    return this.act(name, 'remove', this._busy(name), async () => {
      await this._api.removeContainer(name, force);
      this._warnings.delete(name);
      this.patch({
        containers: this.state.containers.filter(c => c.name !== name)
      });
    });
  }

  /**
   * Serve one more port of a container through the server's proxy; resolves
   * with the container as the server now lists it.
   */
  async addPort(name: string, port: number): Promise<IDevContainer> {
    return this._update(name, 'add-port', () =>
      this._api.addWebPort(name, port)
    );
  }

  /**
   * Stop serving a port added at run time (the server keeps serving the
   * environment's forwardPorts); resolves with the container as the server
   * now lists it.
   */
  async removePort(name: string, port: number): Promise<IDevContainer> {
    return this._update(name, 'remove-port', () =>
      this._api.removeWebPort(name, port)
    );
  }

  /**
   * Make a Jupyter terminal whose shell runs inside a running container.
   * Resolves with the terminal's name, to open with `terminal:open`.
   */
  async terminal(name: string): Promise<string> {
    return this.act(name, 'terminal', this._busy(name), async () => {
      const terminal = await this._api.openContainerTerminal(name);
      return terminal.name;
    });
  }

  protected async load(): Promise<IContainersAnswer> {
    const [environments, containers] = await Promise.all([
      this._api.fetchEnvironments(),
      this._api.fetchContainers()
    ]);
    return { environments, containers };
  }

  protected applyAnswer({
    environments,
    containers
  }: IContainersAnswer): Partial<IContainersState> {
    const names = new Set(containers.containers.map(c => c.name));
    for (const name of [...this._warnings.keys()]) {
      if (!names.has(name)) {
        this._warnings.delete(name);
      }
    }
    return {
      environments: environments.environments,
      problems: environments.problems,
      containers: containers.containers.map(c => this._withWarnings(c))
    };
  }

  /** An action answered with the container: shown as the server describes it. */
  private _update(
    name: string,
    action: ContainerAction,
    run: () => Promise<IDevContainer>
  ): Promise<IDevContainer> {
    return this.act(name, action, this._busy(name), async () => {
      const container = await run();
      this._replace(container);
      return container;
    });
  }

  private _busy(name: string): string {
    return `"${name}" is busy with another action.`;
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
    this.patch({
      containers:
        previous !== undefined
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
    this.patch({
      starting: withEntry(this.state.starting, environment, value)
    });
  }

  private readonly _api: ContainersModel.IAPI;
  private readonly _warnings = new Map<string, string[]>();
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
