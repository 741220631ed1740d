import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { leasesByGPU } from '../../models/hosts';
import type {
  IGPUInfo,
  IGPUInventory,
  IGPULease,
  IGPUUsage,
  IHostUsage
} from '../../types';
import { GPUUsers } from './GPUUsers';
import { MigList } from './MigList';

/**
 * The GPUs of a host: each free or held (and by which lease), its memory
 * and utilization, its use by owner (given the host's `usage`), its MIG
 * instances and details.
 */
export function GPUSection({
  inventory,
  leases,
  usage = null,
  trans
}: {
  inventory: IGPUInventory;
  /** The host's active leases: who holds each GPU. */
  leases: readonly IGPULease[];
  /** The host's GPU use by process; `null` when not known. */
  usage?: IHostUsage | null;
  trans: TranslationBundle;
}): React.JSX.Element {
  const holders = React.useMemo(() => leasesByGPU(leases), [leases]);
  const used = React.useMemo(
    () => new Map((usage?.gpus ?? []).map(gpu => [gpu.uuid, gpu])),
    [usage]
  );
  const versions = [
    inventory.driver_version && trans.__('driver %1', inventory.driver_version),
    inventory.cuda_version && trans.__('CUDA %1', inventory.cuda_version)
  ]
    .filter(Boolean)
    .join(' · ');
  return (
    <div className="jp-gpudev-gpu-section">
      <h5 className="jp-gpudev-section-title">
        {trans.__('GPUs')}
        {versions && <span className="jp-gpudev-muted"> {versions}</span>}
      </h5>
      {inventory.gpus.length === 0 ? (
        <p className="jp-gpudev-nogpu">
          <span className="jp-gpudev-nogpu-label">{trans.__('No GPU')}</span>
          {inventory.reason && (
            <span className="jp-gpudev-nogpu-reason">{inventory.reason}</span>
          )}
        </p>
      ) : (
        <ul className="jp-gpudev-gpus">
          {inventory.gpus.map(gpu => (
            <GPUItem
              key={gpu.uuid}
              gpu={gpu}
              holders={gpuHolders(gpu, holders)}
              usage={gpuUse(used.get(gpu.uuid), usage)}
              trans={trans}
            />
          ))}
        </ul>
      )}
      {inventory.gpus.length > 0 && usage?.reason && (
        <p
          className="jp-gpudev-muted jp-gpudev-usage-reason"
          data-testid="gpudev-usage-reason"
        >
          {trans.__('GPU use by owner unavailable: %1', usage.reason)}
        </p>
      )}
      {inventory.warnings.length > 0 && (
        <ul className="jp-gpudev-warnings">
          {inventory.warnings.map((warning, i) => (
            <li key={i}>{warning}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

/**
 * A GPU's processes to show: none when unknown, nor when the host's reason
 * already says why they are not listed.
 */
function gpuUse(
  gpu: IGPUUsage | undefined,
  host: IHostUsage | null
): IGPUUsage | null {
  if (!gpu || (!gpu.processes_listed && host?.reason)) {
    return null;
  }
  return gpu;
}

const numberFormat = new Intl.NumberFormat();

function mib(value: number | null, trans: TranslationBundle): string {
  return value === null ? trans.__('?') : numberFormat.format(value);
}

/** The leases holding a GPU or one of its MIG instances. */
function gpuHolders(
  gpu: IGPUInfo,
  holders: ReadonlyMap<string, IGPULease>
): IGPULease[] {
  const found = [gpu.uuid, ...gpu.mig_devices.map(device => device.uuid)]
    .map(uuid => holders.get(uuid))
    .filter((lease): lease is IGPULease => lease !== undefined);
  return [...new Set(found)];
}

/** `gpudev-gpu-1a2b (alice) since 14:05`, the local time of `since`. */
function holderText(lease: IGPULease, trans: TranslationBundle): string {
  const since = new Date(lease.since);
  const when = Number.isNaN(since.getTime())
    ? lease.since
    : since.toDateString() === new Date().toDateString()
      ? since.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
      : since.toLocaleString([], {
          month: 'short',
          day: 'numeric',
          hour: '2-digit',
          minute: '2-digit'
        });
  if (!lease.container) {
    // Another user's lease: the server does not say which container holds it.
    return trans.__(
      '%1 since %2',
      lease.owner || trans.__('another user'),
      when
    );
  }
  return lease.owner
    ? trans.__('%1 (%2) since %3', lease.container, lease.owner, when)
    : trans.__('%1 since %2', lease.container, when);
}

function GPUItem({
  gpu,
  holders,
  usage,
  trans
}: {
  gpu: IGPUInfo;
  holders: readonly IGPULease[];
  /** Its processes, when known. */
  usage: IGPUUsage | null;
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <li
      className="jp-gpudev-gpu"
      data-testid={`gpudev-gpu-${gpu.uuid}`}
      title={trans.__('UUID: %1', gpu.uuid)}
    >
      <div className="jp-gpudev-gpu-header">
        <span className="jp-gpudev-gpu-index">{gpu.index}</span>
        <span className="jp-gpudev-gpu-name">{gpu.name}</span>
        <span
          className={
            'jp-gpudev-badge ' +
            (holders.length > 0 ? 'jp-gpudev-badge-warn' : 'jp-gpudev-badge-ok')
          }
          data-testid={`gpudev-gpu-state-${gpu.uuid}`}
        >
          {holders.length > 0 ? trans.__('held') : trans.__('free')}
        </span>
      </div>
      {holders.map(lease => (
        <p
          key={lease.lease_id || lease.container}
          className="jp-gpudev-gpu-holder"
          data-testid={`gpudev-gpu-holder-${gpu.uuid}`}
          title={trans.__('Lease %1', lease.lease_id)}
        >
          {trans.__('Held by %1', holderText(lease, trans))}
        </p>
      ))}
      <MemoryBar gpu={gpu} trans={trans} />
      {usage && <GPUUsers gpu={usage} trans={trans} />}
      {(gpu.mig_enabled || gpu.mig_devices.length > 0) && (
        <MigList gpu={gpu} trans={trans} />
      )}
      <details className="jp-gpudev-gpu-details">
        <summary>{trans.__('Details')}</summary>
        <dl className="jp-gpudev-facts">
          <dt>{trans.__('UUID')}</dt>
          <dd className="jp-gpudev-uuid">{gpu.uuid}</dd>
          {gpu.pci_bus_id && (
            <>
              <dt>{trans.__('PCI bus')}</dt>
              <dd>{gpu.pci_bus_id}</dd>
            </>
          )}
          {gpu.driver_version && (
            <>
              <dt>{trans.__('Driver')}</dt>
              <dd>{gpu.driver_version}</dd>
            </>
          )}
          {gpu.cuda_version && (
            <>
              <dt>{trans.__('CUDA')}</dt>
              <dd>{gpu.cuda_version}</dd>
            </>
          )}
          <dt>{trans.__('MIG mode')}</dt>
          <dd>
            {gpu.mig_enabled ? trans.__('enabled') : trans.__('disabled')}
          </dd>
        </dl>
      </details>
    </li>
  );
}

function MemoryBar({
  gpu,
  trans
}: {
  gpu: IGPUInfo;
  trans: TranslationBundle;
}): React.JSX.Element {
  const total = gpu.memory_total_mib;
  const used = gpu.memory_used_mib;
  const utilisation = (
    <span className="jp-gpudev-gpu-util" title={trans.__('GPU utilisation')}>
      {gpu.utilization_percent === null
        ? trans.__('util n/a')
        : trans.__('%1% util', gpu.utilization_percent)}
    </span>
  );
  if (total === null || total <= 0) {
    return (
      <div className="jp-gpudev-memory">
        <div className="jp-gpudev-memory-stats">
          <span className="jp-gpudev-memory-text">
            {trans.__('Memory: unknown')}
          </span>
          {utilisation}
        </div>
      </div>
    );
  }
  const fraction = used === null ? 0 : Math.min(1, Math.max(0, used / total));
  const text = trans.__('%1 / %2 MiB', mib(used, trans), mib(total, trans));
  return (
    <div className="jp-gpudev-memory">
      <div
        className={
          'jp-gpudev-bar' + (fraction >= 0.9 ? ' jp-gpudev-mod-high' : '')
        }
        role="progressbar"
        aria-label={trans.__('Memory used on GPU %1', gpu.index)}
        aria-valuemin={0}
        aria-valuemax={total}
        aria-valuenow={used ?? undefined}
        aria-valuetext={used === null ? trans.__('unknown') : text}
      >
        <div
          className="jp-gpudev-bar-fill"
          style={{ width: `${(fraction * 100).toFixed(1)}%` }}
        />
      </div>
      <div className="jp-gpudev-memory-stats">
        <span className="jp-gpudev-memory-text">{text}</span>
        {utilisation}
      </div>
    </div>
  );
}
