/**
 * Types of the JSON documents served under `/gpudev/api/`.
 *
 * They mirror the Python side field for field (snake_case included), so a
 * response can be used as it arrives, without any renaming step.
 */

/** How the server talks to a Docker engine. */
export type Transport = 'local' | 'ssh' | 'tcp';

/** Which probe produced a GPU inventory; `none` means no GPU was found. */
export type GPUSource = 'nvml' | 'nvidia-smi' | 'none';

/** What the Docker engine of a reachable host says about itself. */
export interface IEngineInfo {
  version: string;
  api_version: string;
  os: string;
  arch: string;
  kernel_version: string | null;
  operating_system: string | null;
  cgroup_driver: string | null;
  cgroup_version: string | null;
  runtimes: string[];
  default_runtime: string | null;
  nvidia_runtime: boolean;
  nvidia_hook: boolean | null;
  cdi: boolean;
  cdi_spec_dirs: string[];
}

/** One MIG instance of a GPU, leasable on its own by its `MIG-` UUID. */
export interface IMigDevice {
  uuid: string;
  index: number;
  profile: string;
  memory_total_mib: number | null;
}

/** One physical GPU of a host. */
export interface IGPUInfo {
  uuid: string;
  index: number;
  name: string;
  memory_total_mib: number | null;
  memory_used_mib: number | null;
  utilization_percent: number | null;
  driver_version: string | null;
  cuda_version: string | null;
  pci_bus_id: string | null;
  mig_enabled: boolean;
  mig_devices: IMigDevice[];
}

/**
 * The GPUs of a host. An empty `gpus` list with a `reason` is the normal
 * answer for a machine without a usable NVIDIA GPU.
 */
export interface IGPUInventory {
  source: GPUSource;
  gpus: IGPUInfo[];
  driver_version: string | null;
  cuda_version: string | null;
  reason: string | null;
  warnings: string[];
}

/** One Docker host, as listed by `GET /gpudev/api/hosts`. */
export interface IHostInfo {
  name: string;
  url: string;
  transport: Transport;
  is_local: boolean;
  reachable: boolean;
  /** Why the host is unreachable; `null` when it is reachable. */
  reason: string | null;
  /** `null` when the engine did not answer. */
  engine: IEngineInfo | null;
  gpus: IGPUInventory;
}

/** Body of `GET /gpudev/api/hosts` (status 200). */
export interface IHostsResponse {
  hosts: IHostInfo[];
}

/**
 * Structured, safe-to-show context of an error. For "no host reachable"
 * (503) it carries the hosts with their reasons.
 */
export interface IErrorDetails {
  hosts?: IHostInfo[];
  [key: string]: unknown;
}

/** Body of every error answer of the API (4xx/5xx). */
export interface IErrorBody {
  /** A stable, machine-readable name such as `engine_unreachable`. */
  error: string;
  /** A sentence meant for people. */
  message: string;
  details?: IErrorDetails;
}
