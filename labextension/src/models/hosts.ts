import type { ServerConnection } from '@jupyterlab/services';

import { addHost, fetchHosts, removeHost } from '../api/hosts';
import type { GPUDevAPIError } from '../api/errors';
import type {
  IAddHostRequest,
  IGPULease,
  IHostInfo,
  IHostsResponse
} from '../types';
import { PolledModel } from './polled';
import type { IActionsState } from './polled';

/** An action on a host that can be under way. */
export type HostAction = 'add' | 'remove';

/** What the panel shows. */
export interface IHostsState extends IActionsState<HostAction> {
  /**
   * The hosts of the last answer. In `error` they are the hosts the server
   * listed with the error (with the reason each one is unreachable), if any.
   */
  readonly hosts: readonly IHostInfo[];
  /** Actions under way, by host name. */
  readonly pending: ReadonlyMap<string, HostAction>;
}

/**
 * The list of Docker hosts, refreshed by a poll, and the hosts added or
 * removed from the panel.
 *
 * Actions reject with a `GPUDevAPIError`; the list is refreshed after each.
 */
export class HostsModel extends PolledModel<
  IHostsState,
  IHostsResponse,
  HostAction
> {
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
    return this.act(request.name, 'add', this._busy(request.name), async () => {
      const host = await this._api.addHost(request);
      // Shown at once, then as the refresh after the action describes it.
      this.patch({
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
    return this.act(name, 'remove', this._busy(name), async () => {
      await this._api.removeHost(name);
      this.patch({ hosts: this.state.hosts.filter(h => h.name !== name) });
    });
  }

  protected load(): Promise<IHostsResponse> {
    return this._api.fetchHosts();
  }

  protected applyAnswer(answer: IHostsResponse): Partial<IHostsState> {
    return { hosts: answer.hosts };
  }

  /** The hosts the server listed with the error, with why each is unreachable. */
  protected override failedState(error: GPUDevAPIError): Partial<IHostsState> {
    return { hosts: error.hosts };
  }

  private _busy(name: string): string {
    return `Host "${name}" is busy with another action.`;
  }

  private readonly _api: HostsModel.IAPI;
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

/** The index of each GPU (by UUID) of `hosts`. */
export function gpuIndexesOf(hosts: readonly IHostInfo[]): Map<string, number> {
  const indexes = new Map<string, number>();
  for (const host of hosts) {
    for (const gpu of host.gpus.gpus) {
      if (typeof gpu.uuid === 'string' && Number.isInteger(gpu.index)) {
        indexes.set(gpu.uuid, gpu.index);
      }
    }
  }
  return indexes;
}
