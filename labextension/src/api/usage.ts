/**
 * GPU use by dev container, owner and kernel: `/gpudev/api/usage`. Every
 * field may be missing from an older (or newer) server: each is read with a
 * usable default.
 */
import type { ServerConnection } from '@jupyterlab/services';

import type {
  GPUProcessKind,
  IGPUProcessUse,
  IGPUUsage,
  IHostUsage,
  IKernelGPUUse,
  IKernelUsage,
  IUsageResponse
} from '../types';
import { finiteOrNull, isRecord, text, textOrNull } from './json';
import { requestShaped } from './request';

const KINDS: readonly string[] = ['gpudev', 'another user', 'other'];

/** A whole number from 0, or `null`. */
function countOrNull(value: unknown): number | null {
  const number = finiteOrNull(value);
  return number !== null && Number.isInteger(number) && number >= 0
    ? number
    : null;
}

/** A MiB or percent figure from 0, or `null`. */
function amountOrNull(value: unknown): number | null {
  const number = finiteOrNull(value);
  return number !== null && number >= 0 ? number : null;
}

function parseProcess(value: unknown): IGPUProcessUse | null {
  if (!isRecord(value)) {
    return null;
  }
  const kind =
    typeof value.kind === 'string' && KINDS.includes(value.kind)
      ? (value.kind as GPUProcessKind)
      : 'other';
  return {
    kind,
    memory_used_mib: amountOrNull(value.memory_used_mib),
    sm_percent: amountOrNull(value.sm_percent),
    memory_percent: amountOrNull(value.memory_percent),
    container: textOrNull(value.container),
    owner: textOrNull(value.owner),
    pid: countOrNull(value.pid),
    uid: countOrNull(value.uid),
    kernel: textOrNull(value.kernel),
    orphan: value.orphan === true
  };
}

function parseGPUUsage(value: unknown): IGPUUsage | null {
  if (!isRecord(value) || typeof value.uuid !== 'string' || !value.uuid) {
    return null;
  }
  const processes = Array.isArray(value.processes) ? value.processes : [];
  return {
    uuid: value.uuid,
    index: countOrNull(value.index) ?? -1,
    name: text(value.name),
    memory_total_mib: amountOrNull(value.memory_total_mib),
    memory_used_mib: amountOrNull(value.memory_used_mib),
    utilization_percent: amountOrNull(value.utilization_percent),
    // Unknown unless the server says it listed them.
    processes_listed: value.processes_listed !== false,
    processes: processes
      .map(parseProcess)
      .filter((p): p is IGPUProcessUse => p !== null)
  };
}

function parseHostUsage(value: unknown): IHostUsage | null {
  if (!isRecord(value) || typeof value.host !== 'string' || !value.host) {
    return null;
  }
  const gpus = Array.isArray(value.gpus) ? value.gpus : [];
  return {
    host: value.host,
    reason: textOrNull(value.reason),
    gpus: gpus.map(parseGPUUsage).filter((g): g is IGPUUsage => g !== null)
  };
}

/** The GPU use of the hosts as the panel reads it, or `null` for another shape. */
export function parseUsage(value: unknown): IUsageResponse | null {
  if (!isRecord(value) || !Array.isArray(value.hosts)) {
    return null;
  }
  return {
    hosts: value.hosts
      .map(parseHostUsage)
      .filter((h): h is IHostUsage => h !== null)
  };
}

function parseKernelGPU(value: unknown): IKernelGPUUse | null {
  if (!isRecord(value) || typeof value.uuid !== 'string' || !value.uuid) {
    return null;
  }
  return {
    uuid: value.uuid,
    index: countOrNull(value.index),
    name: text(value.name),
    memory_used_mib: amountOrNull(value.memory_used_mib),
    sm_percent: amountOrNull(value.sm_percent),
    memory_percent: amountOrNull(value.memory_percent),
    gpu_memory_used_mib: amountOrNull(value.gpu_memory_used_mib),
    gpu_memory_total_mib: amountOrNull(value.gpu_memory_total_mib),
    gpu_utilization_percent: amountOrNull(value.gpu_utilization_percent)
  };
}

/**
 * One kernel's GPU use (the `kernel` of the answer) as the toolbar item reads
 * it, or `null` for another shape (a server that does not know `?kernel=`
 * answers the hosts' use: `null` too).
 */
export function parseKernelUsage(value: unknown): IKernelUsage | null {
  if (!isRecord(value) || !isRecord(value.kernel)) {
    return null;
  }
  const kernel = value.kernel;
  if (typeof kernel.id !== 'string' || !kernel.id) {
    return null;
  }
  const gpus = Array.isArray(kernel.gpus) ? kernel.gpus : [];
  return {
    id: kernel.id,
    host: text(kernel.host),
    container: text(kernel.container),
    gpus: gpus
      .map(parseKernelGPU)
      .filter((g): g is IKernelGPUUse => g !== null),
    reason: textOrNull(kernel.reason)
  };
}

/**
 * `GET /gpudev/api/usage[?host=NAME]`: what each GPU of every host (or of
 * `host`) is doing, by dev container and owner, as the caller may see it.
 *
 * @throws {GPUDevAPIError} 404 for an unknown `host`.
 */
export async function fetchUsage(
  settings?: ServerConnection.ISettings,
  host?: string
): Promise<IUsageResponse> {
  return requestShaped(['usage'], parseUsage, 'the GPU use', {
    init: { method: 'GET' },
    settings,
    query: host ? { host } : {}
  });
}

/**
 * `GET /gpudev/api/usage?kernel=ID`: what one of the caller's kernels holds
 * on its GPUs.
 *
 * @throws {GPUDevAPIError} 404 for a kernel that is not the caller's (or no
 *   longer exists).
 */
export async function fetchKernelUsage(
  kernelId: string,
  settings?: ServerConnection.ISettings
): Promise<IKernelUsage> {
  return requestShaped(
    ['usage'],
    parseKernelUsage,
    `the GPU use of kernel "${kernelId}"`,
    { init: { method: 'GET' }, settings, query: { kernel: kernelId } }
  );
}
