import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { IClusterInfo, IClusterNode, IGPUAllocation } from '../../types';

/**
 * A Kubernetes host: its version and namespace, and per node its GPU
 * resources (allocated of allocatable) and who holds them. The scheduler
 * decides where GPUs go; this only shows what it allocated.
 */
export function ClusterSection({
  hostName,
  cluster,
  trans
}: {
  hostName: string;
  cluster: IClusterInfo;
  trans: TranslationBundle;
}): React.JSX.Element {
  const gpuNodes = cluster.nodes.filter(node => node.gpus.length > 0);
  const others = cluster.nodes.length - gpuNodes.length;
  return (
    <div className="jp-gpudev-gpu-section">
      <dl className="jp-gpudev-facts">
        <dt>{trans.__('Cluster')}</dt>
        <dd data-testid={`gpudev-cluster-version-${hostName}`}>
          {trans.__('Kubernetes %1', cluster.version)}
        </dd>
        <dt>{trans.__('Namespace')}</dt>
        <dd>
          {cluster.namespace}
          {cluster.context && (
            <span className="jp-gpudev-muted">
              {' '}
              · {trans.__('context %1', cluster.context)}
            </span>
          )}
        </dd>
      </dl>
      <h5 className="jp-gpudev-section-title">
        {trans.__('GPU nodes')}
        {others > 0 && (
          <span className="jp-gpudev-muted">
            {' '}
            {trans._n(
              'and %1 node without GPUs',
              'and %1 nodes without GPUs',
              others
            )}
          </span>
        )}
      </h5>
      {gpuNodes.length === 0 ? (
        <p className="jp-gpudev-nogpu">
          <span className="jp-gpudev-nogpu-label">{trans.__('No GPU')}</span>
          <span className="jp-gpudev-nogpu-reason">
            {trans.__(
              'No node has nvidia.com/gpu or MIG resources (is the NVIDIA device plugin running?)'
            )}
          </span>
        </p>
      ) : (
        <ul className="jp-gpudev-gpus">
          {gpuNodes.map(node => (
            <NodeItem
              key={node.name}
              node={node}
              allocations={cluster.allocations.filter(
                a => a.node === node.name
              )}
              trans={trans}
            />
          ))}
        </ul>
      )}
      {cluster.warnings.length > 0 && (
        <ul className="jp-gpudev-warnings">
          {cluster.warnings.map((warning, i) => (
            <li key={i}>{warning}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

function NodeItem({
  node,
  allocations,
  trans
}: {
  node: IClusterNode;
  allocations: readonly IGPUAllocation[];
  trans: TranslationBundle;
}): React.JSX.Element {
  const state = !node.ready
    ? trans.__('not ready')
    : !node.schedulable
      ? trans.__('cordoned')
      : null;
  return (
    <li className="jp-gpudev-gpu" data-testid={`gpudev-node-${node.name}`}>
      <div className="jp-gpudev-gpu-header">
        <span className="jp-gpudev-gpu-name">{node.name}</span>
        {state && (
          <span className="jp-gpudev-badge jp-gpudev-badge-warn">{state}</span>
        )}
      </div>
      {node.product && (
        <p className="jp-gpudev-muted">
          {node.product}
          {node.memory_mib !== null &&
            ` · ${trans.__('%1 GiB', Math.round(node.memory_mib / 1024))}`}
        </p>
      )}
      {node.gpus.map(gpus => (
        <p key={gpus.resource} data-testid={`gpudev-node-gpus-${node.name}`}>
          {trans.__(
            '%1: %2 of %3 allocated',
            gpus.resource,
            gpus.allocated,
            gpus.allocatable
          )}
        </p>
      ))}
      {allocations.map((allocation, i) => (
        <p key={i} className="jp-gpudev-gpu-holder">
          {allocation.container
            ? trans.__(
                '%1 held by %2 (%3)',
                allocation.count,
                allocation.container,
                allocation.owner
              )
            : allocation.owner
              ? trans.__('%1 held by %2', allocation.count, allocation.owner)
              : trans.__(
                  '%1 held by a workload in %2',
                  allocation.count,
                  allocation.namespace
                )}
        </p>
      ))}
    </li>
  );
}
