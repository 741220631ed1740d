import type { TranslationBundle } from '@jupyterlab/translation';

import type { IKernelGPUUse, IKernelInfo, IKernelUsage } from '../../types';
import { memoryText, percentText, shortGPUName } from '../common/usageText';

/** Characters of a GPU UUID shown when its index is not known. */
const SHORT_UUID_LENGTH = 8;

/**
 * A GPU as short as it can be told apart: its index when known, else the
 * first characters of its UUID (`GPU-5d5ba0d6-...` -> `5d5ba0d6`; a MIG
 * instance keeps its `MIG-` prefix).
 */
export function gpuShortName(
  uuid: string,
  indexes: ReadonlyMap<string, number>
): string {
  const index = indexes.get(uuid);
  if (index !== undefined) {
    return String(index);
  }
  const match = /^(GPU-|MIG-)?(.*)$/.exec(uuid);
  const prefix = match?.[1] ?? '';
  const rest = (match?.[2] ?? uuid).slice(0, SHORT_UUID_LENGTH);
  return prefix === 'MIG-' ? `MIG-${rest}` : rest;
}

/** The GPUs of the kernel in a few characters: `GPU 0, 1` or `CPU only`. */
export function gpusText(
  info: IKernelInfo,
  indexes: ReadonlyMap<string, number>,
  trans: TranslationBundle
): string {
  if (info.gpu_uuids.length === 0) {
    return trans.__('CPU only');
  }
  return trans.__(
    'GPU %1',
    info.gpu_uuids.map(uuid => gpuShortName(uuid, indexes)).join(', ')
  );
}

/** The tooltip of the item: container, host, environment, full GPU UUIDs. */
export function kernelTooltip(
  info: IKernelInfo,
  indexes: ReadonlyMap<string, number>,
  trans: TranslationBundle
): string {
  const lines = [
    info.state
      ? trans.__(
          'GPU Dev kernel in dev container %1 (%2)',
          info.container,
          info.state
        )
      : trans.__('GPU Dev kernel in dev container %1', info.container),
    trans.__('Host: %1', info.host || trans.__('unknown')),
    trans.__('Environment: %1', info.environment || trans.__('unknown'))
  ];
  if (info.gpu_uuids.length === 0) {
    lines.push(trans.__('GPUs: none (CPU only)'));
  } else {
    lines.push(trans._n('GPU:', 'GPUs:', info.gpu_uuids.length));
    for (const uuid of info.gpu_uuids) {
      const index = indexes.get(uuid);
      lines.push(
        index === undefined
          ? `  ${uuid}`
          : `  ${trans.__('GPU %1', index)}: ${uuid}`
      );
    }
  }
  if (info.shared) {
    lines.push(trans.__('Shared: other kernels can run in this container too'));
  }
  return lines.join('\n');
}

/** The label of the release button. */
export function releaseLabel(
  info: IKernelInfo,
  trans: TranslationBundle
): string {
  return info.gpu_uuids.length > 0
    ? trans.__('Release GPU')
    : trans.__('Shut down kernel');
}

/** The GPU's names of `gpus`, each once: `H100`, `2× H100`, `H100, A100`. */
function namesText(gpus: readonly IKernelGPUUse[]): string {
  const counts = new Map<string, number>();
  for (const gpu of gpus) {
    const name = shortGPUName(gpu.name);
    counts.set(name, (counts.get(name) ?? 0) + 1);
  }
  return [...counts]
    .map(([name, count]) => (count > 1 ? `${count}× ${name}` : name))
    .join(', ');
}

/**
 * What the kernel holds on its GPUs, in a few characters: `H100 · 4.2 GiB ·
 * 37%` (memory added up over its GPUs, the busiest one's SM time; `H100 ·
 * 0 MiB` before it uses its GPU, `H100 · use n/a` when its processes
 * there were not listed); `GPU use n/a` when the server cannot tell, `no
 * GPU memory` when it is on no GPU.
 */
export function kernelUsageText(
  usage: IKernelUsage,
  trans: TranslationBundle
): string {
  if (usage.reason !== null) {
    return trans.__('GPU use n/a');
  }
  const gpus = usage.gpus;
  const memory = gpus
    .map(gpu => gpu.memory_used_mib)
    .filter((m): m is number => m !== null);
  const sm = gpus
    .map(gpu => gpu.sm_percent)
    .filter((p): p is number => p !== null);
  const total = memory.reduce((a, b) => a + b, 0);
  if (gpus.length === 0) {
    return trans.__('no GPU memory');
  }
  const parts = [
    namesText(gpus),
    memory.length > 0 ? memoryText(total, trans) : trans.__('use n/a')
  ];
  if (sm.length > 0) {
    parts.push(percentText(Math.max(...sm), trans));
  }
  return parts.filter(Boolean).join(' · ');
}

/**
 * The tooltip of the kernel's GPU use: what it holds on each GPU (memory,
 * SM and memory time) and each GPU's total use; why it is unknown.
 */
export function kernelUsageTooltip(
  usage: IKernelUsage,
  indexes: ReadonlyMap<string, number>,
  trans: TranslationBundle
): string {
  if (usage.reason !== null) {
    return trans.__('GPU use unavailable: %1', usage.reason);
  }
  if (usage.gpus.length === 0) {
    return trans.__('This kernel holds no GPU memory.');
  }
  const lines = [trans.__('GPU use of this kernel:')];
  for (const gpu of usage.gpus) {
    const index = gpu.index ?? indexes.get(gpu.uuid);
    const name = gpu.name || gpu.uuid;
    lines.push(
      index === undefined ? `${name}:` : trans.__('GPU %1 (%2):', index, name),
      '  ' +
        (gpu.memory_used_mib === null
          ? trans.__(
              "this kernel: not known (this GPU's processes were not listed)"
            )
          : trans.__(
              'this kernel: %1, %2 of SM time, %3 of memory time',
              memoryText(gpu.memory_used_mib, trans),
              percentText(gpu.sm_percent, trans),
              percentText(gpu.memory_percent, trans)
            )),
      '  ' +
        trans.__(
          'whole GPU: %1 of %2 used, %3 utilization',
          memoryText(gpu.gpu_memory_used_mib, trans),
          memoryText(gpu.gpu_memory_total_mib, trans),
          percentText(gpu.gpu_utilization_percent, trans)
        )
    );
  }
  return lines.join('\n');
}
