/**
 * The server's documents the tests use: a GPU, a host with its leases, an
 * environment, a dev container, a diff, a GPU's use by process and a
 * kernel's (the JSON of types.ts, with a few fields set by each test).
 */
import type {
  IContainerDiff,
  IDevContainer,
  IEnvironment,
  IGPUInfo,
  IGPULease,
  IGPUProcessUse,
  IGPUUsage,
  IHostInfo,
  IHostUsage,
  IKernelGPUUse,
  IKernelUsage
} from '../src/types';

export function gpu(
  uuid: string,
  index: number,
  extra: Partial<IGPUInfo> = {}
): IGPUInfo {
  return {
    uuid,
    index,
    name: 'NVIDIA A100',
    memory_total_mib: null,
    memory_used_mib: null,
    utilization_percent: null,
    driver_version: null,
    cuda_version: null,
    pci_bus_id: null,
    mig_enabled: false,
    mig_devices: [],
    ...extra
  };
}

export function lease(
  container: string,
  gpuUUIDs: string[],
  extra: Partial<IGPULease> = {}
): IGPULease {
  return {
    lease_id: `lease-${container}`,
    container,
    owner: 'ada',
    gpu_uuids: gpuUUIDs,
    since: '2026-11-24T10:00:00Z',
    ...extra
  };
}

export function host(
  name: string,
  gpus: IGPUInfo[] = [],
  leases: IGPULease[] = []
): IHostInfo {
  return {
    name,
    url: `ssh://${name}`,
    transport: 'ssh',
    is_local: false,
    reachable: true,
    reason: null,
    engine: null,
    gpus: {
      source: 'nvml',
      gpus,
      driver_version: null,
      cuda_version: null,
      reason: null,
      warnings: []
    },
    origin: 'added',
    workspace: null,
    cluster: null,
    leases
  };
}

export function environment(
  name: string,
  gpu: Partial<IEnvironment['gpu']> = {},
  extra: Partial<IEnvironment> = {}
): IEnvironment {
  return {
    name,
    display_name: `Env ${name}`,
    source: '.devcontainer/devcontainer.json',
    image: 'nvcr.io/nvidia/pytorch:24.05-py3',
    gpu: {
      mode: 'required',
      count: 1,
      min_memory_mib: null,
      model: null,
      ...gpu
    },
    forward_ports: [],
    workspace_folder: '/workspace',
    idle_timeout: null,
    ...extra
  };
}

export function devContainer(
  name: string,
  extra: Partial<IDevContainer> = {}
): IDevContainer {
  return {
    name,
    container_id: `${name}-id`,
    host: 'local',
    environment: 'gpu',
    owner: 'ada',
    image: 'img',
    state: 'running',
    status: 'Up 3 minutes',
    created: '2026-11-24T10:00:00Z',
    gpu_uuids: ['GPU-a'],
    lease_id: 'l1',
    ports: {},
    web_ports: [],
    forward_ports: [],
    warnings: [],
    pinned: false,
    kernel_id: null,
    started_at: '2026-11-24T10:00:00Z',
    finished_at: null,
    kernels: 0,
    last_activity: null,
    uncommitted: 0,
    pod: false,
    ...extra
  };
}

export function diff(
  digest: string,
  extra: Partial<IContainerDiff> = {}
): IContainerDiff {
  return {
    dockerfile: '.devcontainer/Dockerfile',
    created: false,
    diff: '+RUN apt-get install -y curl',
    files: [],
    reported: [],
    digest,
    empty: false,
    items: [{ id: 'apt:curl', kind: 'apt', label: 'curl', detail: '' }],
    excluded: [],
    ...extra
  };
}

/** A process of one of the caller's dev containers (`kind` gpudev). */
export function processUse(
  container: string | null,
  extra: Partial<IGPUProcessUse> = {}
): IGPUProcessUse {
  return {
    kind: 'gpudev',
    memory_used_mib: 1024,
    sm_percent: null,
    memory_percent: null,
    container,
    owner: 'ada',
    pid: 4242,
    uid: null,
    kernel: null,
    orphan: false,
    ...extra
  };
}

/** One GPU's use: an 80 GiB H100 with `processes`. */
export function gpuUsage(
  uuid: string,
  index: number,
  processes: IGPUProcessUse[] = [],
  extra: Partial<IGPUUsage> = {}
): IGPUUsage {
  return {
    uuid,
    index,
    name: 'NVIDIA H100 80GB HBM3',
    memory_total_mib: 81559,
    memory_used_mib: 30000,
    utilization_percent: 45,
    processes_listed: true,
    processes,
    ...extra
  };
}

/** A host's GPU use. */
export function hostUsage(
  name: string,
  gpus: IGPUUsage[] = [],
  reason: string | null = null
): IHostUsage {
  return { host: name, reason, gpus };
}

/** What a kernel holds on one GPU: 4.2 GiB of GPU 0, an H100, 37% of SM time. */
export function kernelGPU(
  uuid: string,
  extra: Partial<IKernelGPUUse> = {}
): IKernelGPUUse {
  return {
    uuid,
    index: 0,
    name: 'NVIDIA H100 80GB HBM3',
    memory_used_mib: 4300,
    sm_percent: 37,
    memory_percent: 12,
    gpu_memory_used_mib: 30000,
    gpu_memory_total_mib: 81559,
    gpu_utilization_percent: 45,
    ...extra
  };
}

/** A kernel's GPU use (`GET /gpudev/api/usage?kernel=ID`). */
export function kernelUsage(
  id: string,
  gpus: IKernelGPUUse[] = [kernelGPU('GPU-1')],
  extra: Partial<IKernelUsage> = {}
): IKernelUsage {
  return {
    id,
    host: 'local',
    container: 'c1',
    gpus,
    reason: null,
    ...extra
  };
}
