import type { ServerConnection } from '@jupyterlab/services';

import { fetchUsage } from '../api/usage';
import type {
  IGPUProcessUse,
  IGPUUsage,
  IHostUsage,
  IUsageResponse
} from '../types';
import { PolledModel } from './polled';
import type { IActionsState } from './polled';

/** What the panel shows of the GPUs' use. */
export interface IUsageState extends IActionsState<never> {
  /**
   * Each host's GPU use, by host name, of the last answer (in `error`, of
   * the last successful one).
   */
  readonly hosts: ReadonlyMap<string, IHostUsage>;
}

/**
 * What every GPU is doing, by dev container and owner: one request for all
 * hosts per poll, whoever shows it (the host cards, the dev containers'
 * rows, the idle warnings). It stands by while the panel is hidden, as the
 * hosts and containers do. A server without the usage route leaves it in
 * `error` with no hosts: the panel then shows no use, and says nothing.
 */
export class UsageModel extends PolledModel<
  IUsageState,
  IUsageResponse,
  never
> {
  constructor(options: UsageModel.IOptions = {}) {
    super('jupyter-gpudev:usage', options, {
      status: 'loading',
      hosts: new Map(),
      error: null,
      lastUpdated: null,
      pending: new Map<string, never>()
    });
    const settings = options.serverSettings;
    this._fetchUsage = options.fetchUsage ?? (() => fetchUsage(settings));
  }

  protected load(): Promise<IUsageResponse> {
    return this._fetchUsage();
  }

  protected applyAnswer(answer: IUsageResponse): Partial<IUsageState> {
    return { hosts: new Map(answer.hosts.map(h => [h.host, h])) };
  }

  private readonly _fetchUsage: () => Promise<IUsageResponse>;
}

export namespace UsageModel {
  export interface IOptions extends PolledModel.IOptions {
    /** The server connection; defaults to the page's. */
    serverSettings?: ServerConnection.ISettings;
    /** Replaces the API call, for tests. */
    fetchUsage?: () => Promise<IUsageResponse>;
  }
}

/** Memory and SM time of some processes, added up. */
export interface IUse {
  /** MiB; `null` when none of them said. */
  readonly memoryMiB: number | null;
  /** Percent of the GPU's SM time; `null` when the driver sampled none. */
  readonly smPercent: number | null;
  /** How many processes. */
  readonly processes: number;
}

/** The sum of the known `values`; `null` when none is known. */
function addUp(values: readonly (number | null)[]): number | null {
  const known = values.filter((v): v is number => v !== null);
  return known.length === 0 ? null : known.reduce((a, b) => a + b, 0);
}

/** The use of `processes`, added up. */
export function sumUse(processes: readonly IGPUProcessUse[]): IUse {
  return {
    memoryMiB: addUp(processes.map(p => p.memory_used_mib)),
    smPercent: addUp(processes.map(p => p.sm_percent)),
    processes: processes.length
  };
}

/** One GPU as a dev container uses it. */
export interface IContainerGPUUse {
  readonly gpu: IGPUUsage;
  /** Its kernels' processes. */
  readonly kernels: IUse;
  /** Its other processes (a terminal's, a server's...). */
  readonly others: IUse;
  /** Processes left behind by kernels that ended. */
  readonly orphans: IUse;
}

/**
 * How the dev container `container` of `host` uses each GPU: those it leases
 * (`leased`, in their order) and any other on which it has processes. Empty
 * when the host's use is unknown.
 */
export function containerGPUUse(
  usage: IHostUsage | undefined,
  container: string,
  leased: readonly string[] = []
): IContainerGPUUse[] {
  if (!usage) {
    return [];
  }
  const found: IContainerGPUUse[] = [];
  for (const gpu of usage.gpus) {
    const own = gpu.processes.filter(
      p => p.kind === 'gpudev' && p.container === container
    );
    if (own.length === 0 && !leased.includes(gpu.uuid)) {
      continue;
    }
    const orphans = own.filter(p => p.orphan);
    const live = own.filter(p => !p.orphan);
    found.push({
      gpu,
      kernels: sumUse(live.filter(p => p.kernel !== null)),
      others: sumUse(live.filter(p => p.kernel === null)),
      orphans: sumUse(orphans)
    });
  }
  const rank = (uuid: string): number => {
    const at = leased.indexOf(uuid);
    return at === -1 ? leased.length : at;
  };
  return found.sort(
    (a, b) => rank(a.gpu.uuid) - rank(b.gpu.uuid) || a.gpu.index - b.gpu.index
  );
}

/** Who holds GPU memory, as the host card names them. */
export type Holder =
  | { readonly kind: 'owner'; readonly owner: string }
  | { readonly kind: 'another user'; readonly owner: string }
  | {
      readonly kind: 'process';
      readonly pid: number | null;
      readonly uid: number | null;
    }
  | { readonly kind: 'not gpudev' };

/** One holder's use of one GPU. */
export interface IHolderUse {
  /** Tells holders apart (a React key). */
  readonly key: string;
  readonly holder: Holder;
  /** The dev containers of `holder` using the GPU (`owner` only). */
  readonly containers: readonly string[];
  /** Memory of processes left behind by kernels that ended. */
  readonly orphan: boolean;
  readonly use: IUse;
}

/**
 * Who uses `gpu`: each owner of dev containers (their left-behind processes
 * apart), other users' as the server names them ("another user"), and the
 * processes of no dev container: each by its PID and user id when the
 * server gives them (to an administrator), else together as "not gpudev".
 * Most memory first.
 */
export function holdersOf(gpu: IGPUUsage): IHolderUse[] {
  const groups = new Map<
    string,
    { holder: Holder; orphan: boolean; processes: IGPUProcessUse[] }
  >();
  for (const process of gpu.processes) {
    const { key, holder } = holderOf(process);
    const orphan = process.kind === 'gpudev' && process.orphan;
    const groupKey = `${key}${orphan ? ':orphan' : ''}`;
    const group = groups.get(groupKey) ?? { holder, orphan, processes: [] };
    group.processes.push(process);
    groups.set(groupKey, group);
  }
  return [...groups.entries()]
    .map(([key, group]) => ({
      key,
      holder: group.holder,
      containers: [
        ...new Set(
          group.processes
            .map(p => p.container)
            .filter((c): c is string => c !== null)
        )
      ].sort(),
      orphan: group.orphan,
      use: sumUse(group.processes)
    }))
    .sort((a, b) => (b.use.memoryMiB ?? 0) - (a.use.memoryMiB ?? 0));
}

function holderOf(process: IGPUProcessUse): { key: string; holder: Holder } {
  switch (process.kind) {
    case 'gpudev': {
      const owner = process.owner ?? process.container ?? '';
      return { key: `owner:${owner}`, holder: { kind: 'owner', owner } };
    }
    case 'another user': {
      const owner = process.owner ?? 'another user';
      return {
        key: `another:${owner}`,
        holder: { kind: 'another user', owner }
      };
    }
    default:
      if (process.pid !== null || process.uid !== null) {
        return {
          key: `process:${process.pid ?? '?'}:${process.uid ?? '?'}`,
          holder: { kind: 'process', pid: process.pid, uid: process.uid }
        };
      }
      return { key: 'not-gpudev', holder: { kind: 'not gpudev' } };
  }
}
