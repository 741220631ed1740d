/**
 * The client of the REST API of the server extension (`/gpudev/api/`):
 * one module per area, all on the request helper of `request.ts` and the
 * shape check of `errors.ts` (`checkShape`).
 */
export {
  BUSY,
  busyError,
  checkShape,
  GPUDevAPIError,
  INVALID_RESPONSE,
  NETWORK_ERROR,
  toAPIError
} from './errors';
export { isPortNumber, stringArray } from './json';
export { requestAPI, requestNoContent, requestShaped } from './request';
export type { IRequestOptions, Query } from './request';
export { SSEParser } from './sse';
export type { IServerSentEvent } from './sse';
export { isHostInfo } from './hostShape';
export { addHost, fetchHost, fetchHosts, removeHost } from './hosts';
export {
  addWebPort,
  fetchContainers,
  fetchEnvironments,
  fetchLogs,
  isDevContainer,
  isEnvironment,
  openContainerTerminal,
  pinContainer,
  removeContainer,
  removeWebPort,
  resumeContainer,
  startContainer,
  stopContainer,
  webPortURL
} from './containers';
export type { IStartOptions } from './containers';
export { commitContainer, fetchDiff } from './commit';
export type { ICommitOptions } from './commit';
export {
  fetchKernelInfo,
  fetchReclaims,
  parseReclaims,
  isKernelInfo,
  isReclaim,
  keepKernel,
  releaseKernel
} from './kernels';
export {
  fetchKernelUsage,
  fetchUsage,
  parseKernelUsage,
  parseUsage
} from './usage';
