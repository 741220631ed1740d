/**
 * The GPU picker's units: a GPU held by another user (whose lease comes without
 * its container) is held, never offered as free.
 */
import { leasableUnits } from '../src/components/containers/GPUPicker';
import type { IHostInfo } from '../src/types';

function gpuHost(): IHostInfo {
  const gpu = (uuid: string, index: number) => ({
    uuid,
    index,
    name: 'A100',
    memory_total_mib: null,
    memory_used_mib: null,
    utilization_percent: null,
    driver_version: null,
    cuda_version: null,
    pci_bus_id: null,
    mig_enabled: false,
    mig_devices: []
  });
  return {
    name: 'local',
    url: 'unix:///var/run/docker.sock',
    transport: 'local',
    is_local: true,
    reachable: true,
    reason: null,
    engine: null,
    gpus: {
      source: 'nvml',
      gpus: [gpu('GPU-a', 0), gpu('GPU-b', 1), gpu('GPU-c', 2)],
      driver_version: null,
      cuda_version: null,
      reason: null,
      warnings: []
    },
    origin: 'local',
    workspace: null,
    cluster: null,
    leases: [
      {
        lease_id: 'l1',
        container: 'mine',
        owner: 'ada',
        gpu_uuids: ['GPU-a'],
        since: '2026-11-24T10:00:00Z'
      },
      {
        lease_id: '',
        container: '',
        owner: 'another user',
        gpu_uuids: ['GPU-b'],
        since: '2026-11-24T10:00:00Z'
      }
    ]
  };
}

describe('leasableUnits', () => {
  it('holds the GPUs of other users too, without naming their container', () => {
    const holders = leasableUnits(gpuHost()).map(unit => unit.holder);
    expect(holders).toEqual(['mine', 'another user', null]);
  });
});
