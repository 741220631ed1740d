/**
 * Types of the JSON documents served under `/gpudev/api/`.
 *
 * They mirror the Python side field for field (snake_case included), so a
 * response can be used as it arrives, without any renaming step.
 */

/** How the server talks to a host: a Docker engine, or a Kubernetes cluster (`k8s`). */
export type Transport = 'local' | 'ssh' | 'tcp' | 'k8s';

/**
 * Where a host comes from: the server's own engine (`local`), the
 * configuration (`config`) or `POST /gpudev/api/hosts` (`added`). Only an
 * added host can be removed from the panel.
 */
export type HostOrigin = 'local' | 'config' | 'added';

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
  /** Where the host comes from; only `added` hosts can be removed. */
  origin: HostOrigin;
  /** A remote host's folder mounted as the workspace; `null` if none. */
  workspace: string | null;
  /** The active GPU leases on the host: who holds which GPU, since when. */
  leases: IGPULease[];
  /** A Kubernetes host's version, nodes and GPU allocations; `null` otherwise. */
  cluster: IClusterInfo | null;
}

/** One GPU resource of a cluster node (`nvidia.com/gpu` or a MIG profile). */
export interface INodeGPUs {
  resource: string;
  capacity: number;
  allocatable: number;
  allocated: number;
}

/** One node of a Kubernetes host. */
export interface IClusterNode {
  name: string;
  ready: boolean;
  /** False when the node is cordoned. */
  schedulable: boolean;
  product: string | null;
  memory_mib: number | null;
  gpus: INodeGPUs[];
}

/**
 * GPUs a pod holds: a dev container of gpudev (`container`, `owner`) or
 * another workload (only its namespace is said).
 */
export interface IGPUAllocation {
  node: string;
  resource: string;
  count: number;
  namespace: string;
  container: string;
  owner: string;
}

/** What a Kubernetes host's API server says: its nodes and who holds GPUs. */
export interface IClusterInfo {
  version: string;
  namespace: string;
  context: string;
  nodes: IClusterNode[];
  allocations: IGPUAllocation[];
  warnings: string[];
}

/** GPUs held by one dev container (`GET /gpudev/api/hosts`). */
export interface IGPULease {
  lease_id: string;
  /** The dev container holding them. */
  container: string;
  owner: string;
  gpu_uuids: string[];
  /** ISO 8601 date the lease was taken. */
  since: string;
}

/** Body of `POST /gpudev/api/hosts`: a remote Docker host to add. */
export interface IAddHostRequest {
  /** The name the host is listed under; must be new. */
  name: string;
  /** `ssh://user@host[:port]` or `tcp://host:port`. */
  url: string;
  /** The SSH private key to log in with (a path on the Jupyter server). */
  identity_file?: string;
  /** The known_hosts file holding the host's key (a path on the Jupyter server). */
  known_hosts?: string;
  /** Whether to connect to it before adding it (default true). */
  check?: boolean;
}

/** Body of `GET /gpudev/api/hosts` (status 200). */
export interface IHostsResponse {
  hosts: IHostInfo[];
}

/**
 * Structured, safe-to-show context of an error. For "no host reachable"
 * (503) `hosts` lists the hosts with their reasons; for a start no host can
 * take (409 `no_host`) it maps each host's name to why it cannot.
 */
export interface IErrorDetails {
  hosts?: IHostInfo[] | Record<string, string>;
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

/** Whether an environment needs a GPU (`hostRequirements.gpu` of devcontainer.json). */
export type GPUMode = 'none' | 'optional' | 'required';

/** The GPUs an environment asks for. */
export interface IGPURequirement {
  mode: GPUMode;
  /** GPUs leased when the start request does not name a number. */
  count: number;
  min_memory_mib: number | null;
  model: string | null;
}

/**
 * One environment a dev container can be started from, as listed by
 * `GET /gpudev/api/environments` (only the fields the panel uses are typed).
 */
export interface IEnvironment {
  name: string;
  display_name: string;
  /** Where it was defined: `default`, a devcontainer.json path, the config. */
  source: string;
  /** `null` when the image is built from a Dockerfile. */
  image: string | null;
  gpu: IGPURequirement;
  forward_ports: number[];
  workspace_folder: string;
  /** Seconds; `null` for no idle timeout. */
  idle_timeout: number | null;
  /**
   * What of its devcontainer.json gpudev does not do (a property ignored, a
   * value left out), one sentence each; absent from older servers.
   */
  notes?: string[];
}

/** A devcontainer.json (or configured environment) that could not be used as is. */
export interface IEnvironmentProblem {
  file: string;
  /** The environment's name, when it could be read. */
  name?: string;
  level: 'error' | 'warning';
  message: string;
}

/** Body of `GET /gpudev/api/environments`. */
export interface IEnvironmentsResponse {
  environments: IEnvironment[];
  problems: IEnvironmentProblem[];
}

/**
 * The engine's state of a container: `running`, `exited`, `created`,
 * `paused`, `restarting`, `removing` or `dead`.
 */
export type ContainerState = string;

/** One dev container, as listed by `GET /gpudev/api/containers`. */
export interface IDevContainer {
  name: string;
  container_id: string;
  host: string;
  environment: string;
  owner: string;
  image: string;
  state: ContainerState;
  /** The engine's words for the state, e.g. "Up 3 minutes". */
  status: string;
  /** ISO 8601 date of creation. */
  created: string;
  gpu_uuids: string[];
  lease_id: string | null;
  /** Container port -> port on the host's 127.0.0.1. */
  ports: Record<string, number>;
  /**
   * Ports of the container served, to those allowed to use the server, at
   * `<base_url>gpudev/proxy/<name>/<port>/` (see `webPortURL`): its
   * forwardPorts and those added at run time, sorted.
   */
  web_ports: number[];
  /** The environment's forwardPorts among `web_ports`: always served. */
  forward_ports: number[];
  warnings: string[];
  /**
   * Whether it keeps running (with its GPUs) after its last kernel ends.
   * Only a shared container (`kernel_id` null) can be pinned: one that is
   * not is stopped, and its GPUs freed, when its last kernel ends.
   */
  pinned: boolean;
  /**
   * The kernel the container was created for, and ends with; `null` for a
   * container that kernels can share.
   */
  kernel_id: string | null;
  /** ISO 8601 date it last started, while it runs; else `null`. */
  started_at: string | null;
  /** ISO 8601 date it last stopped, while stopped; else `null`. */
  finished_at: string | null;
  /** Kernels of this Jupyter server running in it; `null` when unknown. */
  kernels: number | null;
  /** ISO 8601 date of its kernels' last activity; `null` without kernel. */
  last_activity: string | null;
  /**
   * How many changes a commit has not carried yet (files, and the files of
   * changed packages); `null` when it could not be read.
   */
  uncommitted: number | null;
  /**
   * A pod on a Kubernetes host: it is never stopped and kept (removing it
   * deletes it, its workspace claim stays) and cannot be committed yet.
   */
  pod: boolean;
}

/** Body of `GET /gpudev/api/containers`. */
export interface IContainersResponse {
  containers: IDevContainer[];
}

/**
 * Body of `POST /gpudev/api/containers/NAME/terminal` (status 201): the model
 * of a Jupyter terminal whose shell runs inside the container. Open it with
 * the `terminal:open` command and its `name`.
 */
export interface IContainerTerminal {
  /** The terminal's name on the Jupyter server, e.g. `"1"`. */
  name: string;
  /** ISO 8601 date of the terminal's last activity, when the server said. */
  last_activity: string | null;
}

/** Body of `POST /gpudev/api/containers`. */
export interface IStartRequest {
  /** The environment's `name`. */
  environment: string;
  /** How many GPUs to lease; the environment's default when left out. */
  gpus?: number;
  /** The GPUs (or MIG instances) to lease by UUID, in place of `gpus`. */
  gpu_uuids?: string[];
  /** The host to start on; when left out the server picks one that can take it. */
  host?: string;
  /** The container's name; generated when left out. */
  name?: string;
}

/**
 * A step of a start, in order: `pull` or `build`, `lease`, `create`,
 * `start`, `postCreateCommand`, `postStartCommand`, `ready` (some are
 * skipped).
 */
export type StartStage = string;

/** Data of one `progress` server-sent event of a streamed start. */
export interface IStartProgress {
  stage: StartStage;
  message: string;
  /** With `total`, how far a pull has got (bytes). */
  current?: number | null;
  total?: number | null;
}

/**
 * A GPU kernel the server will shut down for idleness at `reclaim_at`
 * unless it is used or kept first (`GET /gpudev/api/reclaims`).
 */
export interface IReclaim {
  kernel_id: string;
  /** The kernel's dev container, stopped (and kept) by the reclaim. */
  container: string;
  environment: string;
  /** The GPUs the reclaim frees, by UUID (none for a pod's: the cluster names them). */
  gpu_uuids: string[];
  /** How many GPUs the reclaim frees. */
  gpus: number;
  /** Seconds since the kernel's last activity. */
  idle_seconds: number;
  /** When the kernel will be shut down, in seconds since the Unix epoch. */
  reclaim_at: number;
}

/** Body of `GET /gpudev/api/reclaims`. */
export interface IReclaimsResponse {
  /** The pending reclaims, soonest first. */
  reclaims: IReclaim[];
  /** Seconds a GPU kernel may stay idle (0: reclaim is off). */
  idle_timeout: number;
  /** How long before a reclaim it is listed. */
  warning_seconds: number;
}

/**
 * What one change of a dev container is: an apt package, a Python
 * distribution, a conda spec, a kept file, a deleted path or an environment
 * variable.
 */
export type ChangeKind = 'apt' | 'python' | 'conda' | 'file' | 'delete' | 'env';

/**
 * One change a commit can carry or leave out. Its `id` is stable while the
 * change exists (`apt:NAME`, `python:PREFIX:NAME`, `conda:PREFIX:SPEC`,
 * `file:PATH`, `delete:PATH`, `env:NAME`).
 */
export interface IChangeItem {
  id: string;
  /** A `ChangeKind`; a newer server may send kinds this panel does not know. */
  kind: string;
  /** The change in a few words, e.g. `curl 7.88.1-10`. */
  label: string;
  /** Where and what, e.g. `apt package, added`. */
  detail: string;
}

/**
 * Body of `GET /gpudev/api/containers/NAME/diff`: the changes of a dev
 * container as a Dockerfile diff (only the fields the panel uses are typed).
 */
export interface IContainerDiff {
  /** The Dockerfile the diff patches or creates, relative to the workspace. */
  dockerfile: string;
  /** Whether the Dockerfile is new (the environment had an image only). */
  created: boolean;
  /** A unified diff; empty when nothing would be written. */
  diff: string;
  /** The container's files the commit copies into the build context. */
  files: string[];
  /** What is not written (credentials, installs a Dockerfile cannot repeat). */
  reported: string[];
  /** Names the rendered Dockerfile: a commit can insist on it (`expect`). */
  digest: string;
  empty: boolean;
  /** Every change, in the order the Dockerfile writes them. */
  items: IChangeItem[];
  /** The ids left out, as asked. */
  excluded: string[];
}

/** Body of `POST /gpudev/api/containers/NAME/commit`. */
export interface ICommitRequest {
  /** Write the Dockerfile (and the kept files) into the workspace. */
  write?: boolean;
  /** Rebuild the patched Dockerfile and compare its packages first. */
  verify?: boolean;
  /** Commit the container as this image tag. */
  snapshot?: string;
  /** Push the snapshot to the registry its tag names. */
  push?: boolean;
  /** A message, written as a comment above the new lines. */
  message?: string;
  /** The ids of the changes to leave out (they stay uncommitted). */
  exclude?: string[];
  /** The `digest` of the diff the user reviewed: refused (409) if it changed. */
  expect?: string;
}

/** What a verify build found. */
export interface IVerifyReport {
  image_id: string;
  seconds: number;
  differences: string[];
  ok: boolean;
}

/** The image a commit made of the container. */
export interface ISnapshot {
  reference: string;
  image_id: string;
  pushed: boolean;
  /** The digest the registry gave the pushed image. */
  digest: string | null;
  removed_driver_files: string[];
}

/** The `result` of a commit. */
export interface ICommitResult extends IContainerDiff {
  /** The Dockerfile written (a path on the server); `null` when not written. */
  written: string | null;
  verify: IVerifyReport | null;
  snapshot: ISnapshot | null;
}

/**
 * One `progress` event of a commit: `capture`, `verify` (with the build's
 * lines), `snapshot`, `push` (with `current`/`total` bytes), `write`, `done`.
 */
export type ICommitProgress = IStartProgress;

/**
 * A gpudev kernel, as `GET /gpudev/api/kernels/ID` answers it (404 for a
 * kernel that is not one).
 */
export interface IKernelInfo {
  kernel_id: string;
  /** The dev container the kernel runs in. */
  container: string;
  /** The Docker host of the container. */
  host: string;
  environment: string;
  /** The GPUs leased to the container; empty for a CPU-only one. */
  gpu_uuids: string[];
  /**
   * Whether kernels share the container: then it is not stopped with this
   * kernel, but when its last kernel ends (unless it is pinned).
   */
  shared: boolean;
  /** The engine's state of the container, e.g. `running`. */
  state: string;
  /**
   * Whether the container is a pod on a Kubernetes host: deleted, not
   * stopped, at its end (unless files outside its workspace changed).
   */
  pod: boolean;
}

/**
 * Whose a GPU process is: one of the caller's dev containers (`gpudev`; any
 * user's for an administrator), another user's dev container, or a process
 * of no dev container (`other`).
 */
export type GPUProcessKind = 'gpudev' | 'another user' | 'other';

/** One process on one GPU, as the caller may see it (`GET /gpudev/api/usage`). */
export interface IGPUProcessUse {
  /** A `GPUProcessKind`; a kind this panel does not know is read as `other`. */
  kind: GPUProcessKind;
  memory_used_mib: number | null;
  /** Its share of the GPU's SM time since the last read; `null`: not sampled. */
  sm_percent: number | null;
  /** Its share of the GPU's memory time since the last read; `null`: not sampled. */
  memory_percent: number | null;
  /** Its dev container, named as the caller names it (`gpudev` only). */
  container: string | null;
  /** The container's owner (`"another user"` for someone else's). */
  owner: string | null;
  /** Its PID on the host: the caller's own processes, and administrators'. */
  pid: number | null;
  /** Its user id on the host: administrators only, for a process of no dev container. */
  uid: number | null;
  /** The gpudev kernel whose process tree holds it; `null` for none (or unknown). */
  kernel: string | null;
  /** A process left behind in a dev container by a kernel that ended. */
  orphan: boolean;
}

/** One GPU of a host: its total use, and its processes. */
export interface IGPUUsage {
  uuid: string;
  index: number;
  name: string;
  memory_total_mib: number | null;
  memory_used_mib: number | null;
  utilization_percent: number | null;
  /** False: the driver did not list this GPU's processes (unknown, not idle). */
  processes_listed: boolean;
  processes: IGPUProcessUse[];
}

/** A host's GPUs and their processes; `reason`: why processes (or all) are missing. */
export interface IHostUsage {
  host: string;
  reason: string | null;
  gpus: IGPUUsage[];
}

/** Body of `GET /gpudev/api/usage[?host=NAME]`. */
export interface IUsageResponse {
  hosts: IHostUsage[];
}

/** What one kernel holds on one GPU (`GET /gpudev/api/usage?kernel=ID`). */
export interface IKernelGPUUse {
  uuid: string;
  /** The GPU's index on its host; `null` when not said. */
  index: number | null;
  name: string;
  /** The kernel's processes on this GPU. */
  memory_used_mib: number | null;
  sm_percent: number | null;
  memory_percent: number | null;
  /** The whole GPU, every process on it. */
  gpu_memory_used_mib: number | null;
  gpu_memory_total_mib: number | null;
  gpu_utilization_percent: number | null;
}

/** One kernel's GPU use: the `kernel` of `GET /gpudev/api/usage?kernel=ID`. */
export interface IKernelUsage {
  id: string;
  host: string;
  container: string;
  gpus: IKernelGPUUse[];
  /** Why its use is unknown (the host's processes cannot be read); else `null`. */
  reason: string | null;
}
