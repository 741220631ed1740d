/**
 * GPU use in words: memory, utilization, a GPU's short name, what a kernel
 * holds. Shared by the notebook toolbar item, the release dialog, the idle
 * warnings and the panel.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import type { IUse } from '../../models/usage';
import type { IKernelGPUUse } from '../../types';

const MIB_PER_GIB = 1024;

/** `512 MiB`, `4.2 GiB`, `141 GiB`; `?` when unknown. */
export function memoryText(
  mib: number | null,
  trans: TranslationBundle
): string {
  if (mib === null || !Number.isFinite(mib)) {
    return trans.__('?');
  }
  if (mib < MIB_PER_GIB) {
    return trans.__('%1 MiB', Math.round(mib));
  }
  const gib = mib / MIB_PER_GIB;
  return trans.__('%1 GiB', gib < 100 ? gib.toFixed(1) : Math.round(gib));
}

/** `37%` (at most 100%, a sum of shares included); `?` when unknown. */
export function percentText(
  percent: number | null,
  trans: TranslationBundle
): string {
  if (percent === null || !Number.isFinite(percent)) {
    return trans.__('?');
  }
  return `${Math.round(Math.min(100, Math.max(0, percent)))}%`;
}

/** `4.2 GiB · 37%` (the SM time left out when not sampled). */
export function useText(use: IUse, trans: TranslationBundle): string {
  const memory = memoryText(use.memoryMiB, trans);
  return use.smPercent === null
    ? memory
    : `${memory} · ${percentText(use.smPercent, trans)}`;
}

/** Words of a GPU's name that say its memory, form factor or packaging. */
const SPEC_WORD = /^(\d+\s*GB|HBM\d*e?|PCIe|SXM\d*|NVL|NVLink|MIG.*)$/i;

/**
 * A GPU's name as short as people say it: `NVIDIA H100 80GB HBM3` -> `H100`,
 * `NVIDIA A100-SXM4-80GB` -> `A100`, `NVIDIA GeForce RTX 4090` -> `RTX 4090`,
 * `Tesla T4` -> `T4`. The name as is when nothing is left.
 */
export function shortGPUName(name: string): string {
  const words = name
    .trim()
    .replace(/^NVIDIA\s+/i, '')
    .replace(/^(Tesla|GeForce|Quadro)\s+/i, '')
    .split(/\s+/)
    .map(word => word.replace(/-(SXM|PCIE|\d+GB).*$/i, ''));
  const kept: string[] = [];
  for (const word of words) {
    if (SPEC_WORD.test(word)) {
      break;
    }
    kept.push(word);
  }
  const short = kept.join(' ');
  return short || name.trim();
}

/** `H100 GPU 0`, `H100` when its index is unknown. */
function gpuLabel(gpu: IKernelGPUUse, trans: TranslationBundle): string {
  const name = shortGPUName(gpu.name) || trans.__('GPU');
  return gpu.index === null ? name : trans.__('%1 GPU %2', name, gpu.index);
}

/**
 * What a kernel holds, for a sentence: `4.2 GiB on H100 GPU 0, 0% now` (its
 * SM time left out when the driver did not sample it), each GPU it uses;
 * empty when it holds nothing known.
 */
export function holdsText(
  gpus: readonly IKernelGPUUse[],
  trans: TranslationBundle
): string {
  return gpus
    .filter(gpu => gpu.memory_used_mib !== null || gpu.sm_percent !== null)
    .map(gpu =>
      gpu.sm_percent === null
        ? trans.__(
            '%1 on %2',
            memoryText(gpu.memory_used_mib, trans),
            gpuLabel(gpu, trans)
          )
        : trans.__(
            '%1 on %2, %3 now',
            memoryText(gpu.memory_used_mib, trans),
            gpuLabel(gpu, trans),
            percentText(gpu.sm_percent, trans)
          )
    )
    .join('; ');
}
