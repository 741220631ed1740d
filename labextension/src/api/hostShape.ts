/**
 * The shape of a host (`GET /gpudev/api/hosts`), apart from the calls: the
 * error of a "no host reachable" answer lists hosts too (see
 * `GPUDevAPIError.hosts`).
 */
import type { HostOrigin, IGPULease, IHostInfo } from '../types';
import { isRecord, stringArray } from './json';

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
      : []
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
