/**
 * Kernels: a gpudev kernel's container and GPUs (`/gpudev/api/kernels`)
 * and the idle GPU kernels about to be reclaimed (`/gpudev/api/reclaims`).
 */
import type { ServerConnection } from '@jupyterlab/services';

import type { IKernelInfo, IReclaim, IReclaimsResponse } from '../types';
import { finiteOrNull, isRecord, stringArray, text } from './json';
import { requestNoContent, requestShaped } from './request';

/** True when `value` has the fields the toolbar item relies on. */
export function isKernelInfo(value: unknown): value is IKernelInfo {
  return (
    isRecord(value) &&
    typeof value.kernel_id === 'string' &&
    typeof value.container === 'string' &&
    value.container !== '' &&
    Array.isArray(value.gpu_uuids)
  );
}

/** A kernel as the toolbar item reads it, or `null` for another shape. */
export function parseKernelInfo(value: unknown): IKernelInfo | null {
  if (!isKernelInfo(value)) {
    return null;
  }
  return {
    kernel_id: value.kernel_id,
    container: value.container,
    host: text(value.host),
    environment: text(value.environment),
    gpu_uuids: stringArray(value.gpu_uuids),
    shared: (value.shared as unknown) === true,
    state: text(value.state),
    pod: (value.pod as unknown) === true
  };
}

/**
 * `GET /gpudev/api/kernels/ID`: the dev container and GPUs of a gpudev
 * kernel.
 *
 * @throws {GPUDevAPIError} 404 `not_found` for a kernel that is not a gpudev
 *   one (or no longer exists).
 */
export async function fetchKernelInfo(
  kernelId: string,
  settings?: ServerConnection.ISettings
): Promise<IKernelInfo> {
  return requestShaped(
    ['kernels', kernelId],
    parseKernelInfo,
    `kernel "${kernelId}"`,
    { init: { method: 'GET' }, settings }
  );
}

/** True when `value` has the fields the panel relies on to show a reclaim. */
export function isReclaim(value: unknown): value is IReclaim {
  return (
    isRecord(value) &&
    typeof value.kernel_id === 'string' &&
    value.kernel_id !== '' &&
    typeof value.container === 'string' &&
    typeof value.reclaim_at === 'number' &&
    Number.isFinite(value.reclaim_at)
  );
}

/** The same reclaim with every field the panel reads present. */
function normaliseReclaim(reclaim: IReclaim): IReclaim {
  return {
    kernel_id: reclaim.kernel_id,
    container: reclaim.container,
    environment: text(reclaim.environment),
    gpu_uuids: stringArray(reclaim.gpu_uuids),
    gpus: Math.max(
      0,
      Math.floor(
        finiteOrNull(reclaim.gpus) ?? stringArray(reclaim.gpu_uuids).length
      )
    ),
    idle_seconds: Math.max(0, finiteOrNull(reclaim.idle_seconds) ?? 0),
    reclaim_at: reclaim.reclaim_at
  };
}

/** The pending reclaims as the panel reads them, or `null` for another shape. */
export function parseReclaims(value: unknown): IReclaimsResponse | null {
  if (!isRecord(value) || !Array.isArray(value.reclaims)) {
    return null;
  }
  return {
    reclaims: value.reclaims.filter(isReclaim).map(normaliseReclaim),
    idle_timeout: finiteOrNull(value.idle_timeout) ?? 0,
    warning_seconds: finiteOrNull(value.warning_seconds) ?? 0
  };
}

/**
 * `GET /gpudev/api/reclaims`: the GPU kernels that will be shut down for
 * idleness soon unless they are used or kept.
 */
export async function fetchReclaims(
  settings?: ServerConnection.ISettings
): Promise<IReclaimsResponse> {
  return requestShaped(
    ['reclaims'],
    parseReclaims,
    'the pending GPU reclaims',
    { init: { method: 'GET' }, settings }
  );
}

/**
 * `POST /gpudev/api/kernels/ID/keep`: keep an idle GPU kernel; its idle
 * time starts again and it leaves the pending reclaims.
 *
 * @throws {GPUDevAPIError} 404 `not_found` when no such kernel holds GPUs.
 */
export async function keepKernel(
  kernelId: string,
  settings?: ServerConnection.ISettings
): Promise<void> {
  return kernelAction(kernelId, 'keep', settings);
}

/**
 * `POST /gpudev/api/kernels/ID/release`: shut an idle GPU kernel down now;
 * its container is stopped (and kept) and its GPUs freed.
 *
 * @throws {GPUDevAPIError} 404 `not_found` when no such kernel holds GPUs.
 */
export async function releaseKernel(
  kernelId: string,
  settings?: ServerConnection.ISettings
): Promise<void> {
  return kernelAction(kernelId, 'release', settings);
}

/** An action on a kernel, answered with an empty 204 when it went well. */
async function kernelAction(
  kernelId: string,
  action: 'keep' | 'release',
  settings?: ServerConnection.ISettings
): Promise<void> {
  return requestNoContent(['kernels', kernelId, action], {
    init: { method: 'POST' },
    settings
  });
}
