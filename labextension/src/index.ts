/**
 * The entry point of the Lab extension: its plugins (plugins/), and what
 * other extensions may use (the token of the panel's models, the API
 * client, the models, the panel widget, the JSON types).
 */
import { notebookToolbarPlugin } from './plugins/notebookToolbar';
import { panelPlugin } from './plugins/panel';
import { untrustedOutputsPlugin } from './plugins/untrustedOutputs';

export {
  GPUDevAPIError,
  addHost,
  addWebPort,
  commitContainer,
  fetchDiff,
  fetchLogs,
  fetchContainers,
  fetchEnvironments,
  fetchHost,
  fetchHosts,
  fetchKernelInfo,
  fetchKernelUsage,
  fetchReclaims,
  fetchUsage,
  keepKernel,
  openContainerTerminal,
  pinContainer,
  releaseKernel,
  removeContainer,
  removeHost,
  removeWebPort,
  requestAPI,
  resumeContainer,
  startContainer,
  stopContainer,
  webPortURL
} from './api';
export type { IStartOptions } from './api';
export {
  CommitModel,
  ContainersModel,
  HostsModel,
  KernelUsages,
  ReclaimsModel,
  UsageModel
} from './models';
export type {
  ContainerAction,
  ICommitChoices,
  ICommitState,
  HostAction,
  IContainersState,
  IHostsState,
  IReclaimsState,
  IStartState,
  IUsageState,
  ReclaimAction
} from './models';
export { HostsPanel } from './components/hosts/HostsPanel';
export type { OpenTerminal } from './components/containers/types';
export type * from './types';
export { IGPUDevModel } from './tokens';
export {
  API_PATH,
  CommandIDs,
  NOTEBOOK_TOOLBAR_PLUGIN_ID,
  PLUGIN_ID,
  UNTRUSTED_OUTPUTS_PLUGIN_ID
} from './constants';
export { notebookToolbarPlugin, panelPlugin, untrustedOutputsPlugin };

export default [panelPlugin, notebookToolbarPlugin, untrustedOutputsPlugin];
