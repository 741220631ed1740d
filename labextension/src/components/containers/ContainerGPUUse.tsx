import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { IContainerGPUUse } from '../../models/usage';
import {
  memoryText,
  percentText,
  shortGPUName,
  useText
} from '../common/usageText';

/** `GPU 0 · H100`. */
function gpuText(use: IContainerGPUUse, trans: TranslationBundle): string {
  const name = shortGPUName(use.gpu.name);
  const index = use.gpu.index >= 0 ? trans.__('GPU %1', use.gpu.index) : '';
  return [index, name].filter(Boolean).join(' · ') || use.gpu.uuid;
}

/** The whole GPU's use, for a tooltip. */
function gpuTitle(use: IContainerGPUUse, trans: TranslationBundle): string {
  const gpu = use.gpu;
  return [
    `${gpu.name || trans.__('GPU')} (${gpu.uuid})`,
    trans.__(
      'Whole GPU: %1 of %2 used, %3 utilization',
      memoryText(gpu.memory_used_mib, trans),
      memoryText(gpu.memory_total_mib, trans),
      percentText(gpu.utilization_percent, trans)
    )
  ].join('\n');
}

/**
 * How a dev container uses each GPU: the memory and SM time of its
 * kernels and of its other processes, and the memory left behind by kernels
 * that ended (flagged). Nothing when its use is not known.
 */
export function ContainerGPUUse({
  name,
  uses,
  trans
}: {
  /** The container's name (for the test ids). */
  name: string;
  uses: readonly IContainerGPUUse[];
  trans: TranslationBundle;
}): React.JSX.Element | null {
  if (uses.length === 0) {
    return null;
  }
  return (
    <ul
      className="jp-gpudev-gpu-use"
      data-testid={`gpudev-container-gpu-use-${name}`}
    >
      {uses.map(use => {
        const idle =
          use.kernels.processes +
            use.others.processes +
            use.orphans.processes ===
          0;
        return (
          <li
            key={use.gpu.uuid}
            className="jp-gpudev-gpu-use-item"
            data-testid={`gpudev-container-gpu-use-${name}-${use.gpu.uuid}`}
            title={gpuTitle(use, trans)}
          >
            <span className="jp-gpudev-gpu-use-gpu">{gpuText(use, trans)}</span>
            {!use.gpu.processes_listed ? (
              <span className="jp-gpudev-muted">
                {trans.__('processes not listed')}
              </span>
            ) : idle ? (
              <span className="jp-gpudev-muted">
                {trans.__('nothing running')}
              </span>
            ) : (
              <>
                {use.kernels.processes > 0 && (
                  <span
                    className="jp-gpudev-gpu-use-part"
                    title={trans._n(
                      '%1 process of its kernels',
                      '%1 processes of its kernels',
                      use.kernels.processes
                    )}
                  >
                    {trans.__('kernels %1', useText(use.kernels, trans))}
                  </span>
                )}
                {use.others.processes > 0 && (
                  <span
                    className="jp-gpudev-gpu-use-part"
                    title={trans._n(
                      '%1 other process (not a kernel: a terminal, a server...)',
                      '%1 other processes (not kernels: terminals, servers...)',
                      use.others.processes
                    )}
                  >
                    {trans.__('other %1', useText(use.others, trans))}
                  </span>
                )}
                {use.orphans.processes > 0 && (
                  <span
                    className="jp-gpudev-badge jp-gpudev-badge-warn"
                    data-testid={`gpudev-container-orphan-${name}-${use.gpu.uuid}`}
                    title={trans._n(
                      'Left behind: %1 process of a kernel that ended still holds this memory. End it from a terminal in the container, or stop the container.',
                      'Left behind: %1 processes of kernels that ended still hold this memory. End them from a terminal in the container, or stop the container.',
                      use.orphans.processes
                    )}
                  >
                    {trans.__(
                      'left behind %1',
                      memoryText(use.orphans.memoryMiB, trans)
                    )}
                  </span>
                )}
              </>
            )}
          </li>
        );
      })}
    </ul>
  );
}
