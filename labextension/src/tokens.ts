/**
 * The Lumino tokens of the extension: what its plugins provide to others.
 * The types of the server's JSON are in `types.ts`.
 */
import { Token } from '@lumino/coreutils';

import type { ContainersModel } from './models/containers';
import type { HostsModel } from './models/hosts';
import type { ReclaimsModel } from './models/reclaims';
import type { UsageModel } from './models/usage';

/**
 * The polled models of the GPU Dev panel, provided by the main plugin
 * (`jupyter-gpudev:plugin`): one poll of each list for the whole page,
 * whoever shows it (the panel, the notebook toolbar item, another
 * extension).
 */
export interface IGPUDevModel {
  /** The Docker hosts with their engines, GPUs and leases. */
  readonly hosts: HostsModel;
  /** The environments and the dev containers. */
  readonly containers: ContainersModel;
  /** The idle GPU kernels about to be reclaimed. */
  readonly reclaims: ReclaimsModel;
  /**
   * What each GPU is doing, by dev container and owner (one request for
   * all hosts per poll, while the panel is shown).
   */
  readonly usage: UsageModel;
}

/** The token of the panel's polled models. */
export const IGPUDevModel = new Token<IGPUDevModel>(
  'jupyter-gpudev:IGPUDevModel',
  'The polled models of the GPU Dev panel: hosts, dev containers, pending GPU reclaims, GPU use.'
);
