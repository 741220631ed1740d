import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { IGPUInfo, IMigDevice } from '../../types';

const numberFormat = new Intl.NumberFormat();

/** The MIG instances of a GPU in MIG mode, each with its profile and memory. */
export function MigList({
  gpu,
  trans
}: {
  gpu: IGPUInfo;
  trans: TranslationBundle;
}): React.JSX.Element {
  if (gpu.mig_devices.length === 0) {
    return (
      <p className="jp-gpudev-mig-empty">
        {trans.__('MIG enabled, no instances')}
      </p>
    );
  }
  return (
    <ul
      className="jp-gpudev-migs"
      aria-label={trans.__('MIG devices of GPU %1', gpu.index)}
    >
      {gpu.mig_devices.map((device: IMigDevice) => (
        <li
          key={device.uuid}
          className="jp-gpudev-mig"
          data-testid={`gpudev-mig-${device.uuid}`}
          title={trans.__('UUID: %1', device.uuid)}
        >
          <span className="jp-gpudev-mig-index">
            {trans.__('MIG %1', device.index)}
          </span>
          <span className="jp-gpudev-mig-profile">{device.profile}</span>
          {device.memory_total_mib !== null && (
            <span className="jp-gpudev-muted">
              {trans.__('%1 MiB', numberFormat.format(device.memory_total_mib))}
            </span>
          )}
        </li>
      ))}
    </ul>
  );
}
