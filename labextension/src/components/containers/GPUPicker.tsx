import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { leasesByGPU } from '../../models/hosts';
import type { IHostInfo } from '../../types';

/** A GPU (or MIG instance) of a host a start can name. */
export interface ILeasableUnit {
  uuid: string;
  /** `GPU 0 · NVIDIA A100` or `GPU 0 · MIG 1g.5gb`. */
  label: string;
  /** The container holding it, or `null` when it is free. */
  holder: string | null;
}

/** The units of a host a start can name, with who holds each. */
export function leasableUnits(host: IHostInfo): ILeasableUnit[] {
  const leases = leasesByGPU(host.leases);
  // Another user's lease comes without its container: its owner reads "another user".
  const holder = (uuid: string): string | null => {
    const lease = leases.get(uuid);
    return lease ? lease.container || lease.owner || 'another user' : null;
  };
  const units: ILeasableUnit[] = [];
  for (const gpu of host.gpus.gpus) {
    if (gpu.mig_enabled && gpu.mig_devices.length > 0) {
      for (const device of gpu.mig_devices) {
        units.push({
          uuid: device.uuid,
          label: `GPU ${gpu.index} · MIG ${device.profile}`,
          holder: holder(device.uuid) ?? holder(gpu.uuid)
        });
      }
    } else {
      units.push({
        uuid: gpu.uuid,
        label: `GPU ${gpu.index} · ${gpu.name}`,
        holder: holder(gpu.uuid)
      });
    }
  }
  return units;
}

/**
 * The GPUs of a host a start can lease by name, each with a checkbox (a
 * held one disabled, with its holder).
 */
export function GPUPicker({
  environment,
  host,
  units,
  chosen,
  disabled,
  onChange,
  trans
}: {
  environment: string;
  host: string;
  units: readonly ILeasableUnit[];
  /** The UUIDs chosen, in the order they were. */
  chosen: readonly string[];
  disabled: boolean;
  onChange: (chosen: readonly string[]) => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  const pickerId = React.useId();
  return (
    <details className="jp-gpudev-gpu-picker">
      <summary data-testid={`gpudev-env-pick-${environment}`}>
        {chosen.length > 0
          ? trans._n(
              '%1 GPU chosen on %2',
              '%1 GPUs chosen on %2',
              chosen.length,
              host
            )
          : trans.__('Choose GPUs on %1', host)}
      </summary>
      <fieldset
        className="jp-gpudev-gpu-choices"
        disabled={disabled}
        aria-describedby={pickerId}
      >
        <legend id={pickerId} className="jp-gpudev-field-hint">
          {trans.__(
            'Lease these GPUs by name; with none chosen, any free GPUs are leased by count.'
          )}
        </legend>
        {units.map(unit => (
          <label
            key={unit.uuid}
            className="jp-gpudev-check"
            title={
              unit.holder ? trans.__('Held by %1', unit.holder) : unit.uuid
            }
          >
            <input
              type="checkbox"
              data-testid={`gpudev-env-gpu-${environment}-${unit.uuid}`}
              checked={chosen.includes(unit.uuid)}
              disabled={unit.holder !== null}
              onChange={event => {
                const checked = event.currentTarget.checked;
                onChange(
                  checked
                    ? [...chosen.filter(u => u !== unit.uuid), unit.uuid]
                    : chosen.filter(u => u !== unit.uuid)
                );
              }}
            />
            <span>{unit.label}</span>
            {unit.holder && (
              <span className="jp-gpudev-muted">
                {trans.__('held by %1', unit.holder)}
              </span>
            )}
          </label>
        ))}
      </fieldset>
    </details>
  );
}
