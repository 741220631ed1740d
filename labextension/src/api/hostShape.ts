/**
 * The shape of a host (`GET /gpudev/api/hosts`), apart from the calls: the
 * error of a "no host reachable" answer lists hosts too (see
 * `GPUDevAPIError.hosts`).
 */
import type {
  HostOrigin,
  IClusterInfo,
  IClusterNode,
  IGPUAllocation,
  IGPULease,
  IHostInfo,
  INodeGPUs
} from '../types';
import { finiteOrNull, isRecord, stringArray, text, textOrNull } from './json';

/** True when `value` has the fields the panel relies on to draw a host. */
export function isHostInfo(value: unknown): value is IHostInfo {
  return (
    isRecord(value) &&
    typeof value.name === 'string' &&
    typeof value.reachable === 'boolean' &&
    isRecord(value.gpus) &&
    Array.isArray(value.gpus.gpus)
  );
}

const ORIGINS: readonly string[] = ['local', 'config', 'added'];

/**
 * The same host with every field the panel reads present: a server from
 * before `origin` and `workspace` leaves them out (its hosts are local or
 * configured, never added).
 */
export function normaliseHost(host: IHostInfo): IHostInfo {
  const origin: unknown = host.origin;
  const workspace: unknown = host.workspace;
  const leases: unknown = host.leases;
  return {
    ...host,
    url: typeof host.url === 'string' ? host.url : '',
    origin:
      typeof origin === 'string' && ORIGINS.includes(origin)
        ? (origin as HostOrigin)
        : host.is_local
          ? 'local'
          : 'config',
    workspace:
      typeof workspace === 'string' && workspace !== '' ? workspace : null,
    leases: Array.isArray(leases)
      ? leases.filter(isLease).map(lease => ({
          lease_id: typeof lease.lease_id === 'string' ? lease.lease_id : '',
          container: lease.container,
          owner: typeof lease.owner === 'string' ? lease.owner : '',
          gpu_uuids: stringArray(lease.gpu_uuids),
          since: typeof lease.since === 'string' ? lease.since : ''
        }))
      : [],
    cluster: parseCluster(host.cluster)
  };
}

/** A count the panel can show: a whole number from 0 (else 0). */
function count(value: unknown): number {
  const number = finiteOrNull(value);
  return number !== null && Number.isInteger(number) && number >= 0
    ? number
    : 0;
}

function parseNodeGPUs(value: unknown): INodeGPUs | null {
  if (!isRecord(value) || typeof value.resource !== 'string') {
    return null;
  }
  return {
    resource: value.resource,
    capacity: count(value.capacity),
    allocatable: count(value.allocatable),
    allocated: count(value.allocated)
  };
}

function parseNode(value: unknown): IClusterNode | null {
  if (!isRecord(value) || typeof value.name !== 'string') {
    return null;
  }
  const gpus = Array.isArray(value.gpus) ? value.gpus : [];
  return {
    name: value.name,
    ready: value.ready === true,
    schedulable: value.schedulable !== false,
    product: textOrNull(value.product),
    memory_mib: finiteOrNull(value.memory_mib),
    gpus: gpus.map(parseNodeGPUs).filter((g): g is INodeGPUs => g !== null)
  };
}

function parseAllocation(value: unknown): IGPUAllocation | null {
  if (
    !isRecord(value) ||
    typeof value.node !== 'string' ||
    typeof value.resource !== 'string'
  ) {
    return null;
  }
  return {
    node: value.node,
    resource: value.resource,
    count: count(value.count),
    namespace: text(value.namespace),
    container: text(value.container),
    owner: text(value.owner)
  };
}

/**
 * A Kubernetes host's cluster facts with every field the panel reads, or
 * `null` (not a cluster, or a server from before clusters were listed).
 */
export function parseCluster(value: unknown): IClusterInfo | null {
  if (!isRecord(value) || typeof value.version !== 'string') {
    return null;
  }
  const nodes = Array.isArray(value.nodes) ? value.nodes : [];
  const allocations = Array.isArray(value.allocations) ? value.allocations : [];
  return {
    version: value.version,
    namespace: text(value.namespace),
    context: text(value.context),
    nodes: nodes.map(parseNode).filter((n): n is IClusterNode => n !== null),
    allocations: allocations
      .map(parseAllocation)
      .filter((a): a is IGPUAllocation => a !== null),
    warnings: stringArray(value.warnings)
  };
}

/** A host as the panel reads it, or `null` for another shape. */
export function parseHost(value: unknown): IHostInfo | null {
  return isHostInfo(value) ? normaliseHost(value) : null;
}

function isLease(value: unknown): value is IGPULease {
  return (
    isRecord(value) &&
    typeof value.container === 'string' &&
    Array.isArray(value.gpu_uuids)
  );
}
