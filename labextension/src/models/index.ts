/**
 * The models: each holds the state of one part of the UI on the base of
 * `state.ts` (state, `stateChanged`, `refresh`, `dispose`); the polled
 * ones on `polled.ts` (poll, backoff, actions under way).
 */
export { StateModel, withEntry } from './state';
export type { IStateModel } from './state';
export { PolledModel } from './polled';
export type { IActionsState, IPolledState } from './polled';
export { gpuIndexesOf, HostsModel, leasesByGPU } from './hosts';
export type { HostAction, IHostsState } from './hosts';
export {
  changedPaths,
  ContainersModel,
  isUncommittedChanges
} from './containers';
export type {
  ContainerAction,
  IContainersState,
  IStartState
} from './containers';
export { ReclaimsModel } from './reclaims';
export type { IReclaimsState, ReclaimAction } from './reclaims';
export { COMMIT_LOG_LINES, CommitModel } from './commit';
export type { ICommitChoices, ICommitState } from './commit';
export { GPUIndexes, KernelBadgeModel } from './kernelBadge';
export type { IKernelBadgeState } from './kernelBadge';
export { KernelUsages } from './kernelUsage';
export type { IKernelUsageState } from './kernelUsage';
export { containerGPUUse, holdersOf, sumUse, UsageModel } from './usage';
export type {
  Holder,
  IContainerGPUUse,
  IHolderUse,
  IUsageState,
  IUse
} from './usage';
