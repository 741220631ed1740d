import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { holdersOf } from '../../models/usage';
import type { Holder, IHolderUse } from '../../models/usage';
import type { IGPUUsage } from '../../types';
import { useText } from '../common/usageText';

/**
 * Who a holder is, in words: an owner of dev containers, "another user" (as
 * the server names them), a process by its PID and user id (for an
 * administrator), or "not gpudev".
 */
export function holderLabel(holder: Holder, trans: TranslationBundle): string {
  switch (holder.kind) {
    case 'owner':
      return holder.owner || trans.__('gpudev');
    case 'another user':
      return holder.owner;
    case 'process':
      if (holder.pid !== null && holder.uid !== null) {
        return trans.__('PID %1 (uid %2)', holder.pid, holder.uid);
      }
      return holder.pid !== null
        ? trans.__('PID %1', holder.pid)
        : trans.__('uid %1', holder.uid ?? '?');
    default:
      return trans.__('not gpudev');
  }
}

function holderTitle(use: IHolderUse, trans: TranslationBundle): string {
  const lines: string[] = [];
  if (use.containers.length > 0) {
    lines.push(trans.__('Dev containers: %1', use.containers.join(', ')));
  }
  if (use.holder.kind === 'not gpudev' || use.holder.kind === 'process') {
    lines.push(trans.__('Processes of no dev container'));
  }
  if (use.orphan) {
    lines.push(
      trans.__(
        'Left behind by kernels that ended: their processes still hold this memory'
      )
    );
  }
  lines.push(trans._n('%1 process', '%1 processes', use.use.processes));
  return lines.join('\n');
}

/**
 * The use of one GPU by owner: memory and SM time of each owner's dev
 * containers (what kernels that ended left behind flagged apart), other
 * users', and processes of no dev container. Nothing for an idle GPU; a
 * note when the driver did not list its processes.
 */
export function GPUUsers({
  gpu,
  trans
}: {
  gpu: IGPUUsage;
  trans: TranslationBundle;
}): React.JSX.Element | null {
  const holders = React.useMemo(() => holdersOf(gpu), [gpu]);
  if (!gpu.processes_listed) {
    return (
      <p
        className="jp-gpudev-gpu-users jp-gpudev-muted"
        data-testid={`gpudev-gpu-users-${gpu.uuid}`}
      >
        {trans.__('Processes not listed')}
      </p>
    );
  }
  if (holders.length === 0) {
    return null;
  }
  return (
    <ul
      className="jp-gpudev-gpu-users"
      data-testid={`gpudev-gpu-users-${gpu.uuid}`}
      aria-label={trans.__('Use of GPU %1 by owner', gpu.index)}
    >
      {holders.map(use => (
        <li
          key={use.key}
          className="jp-gpudev-gpu-user"
          title={holderTitle(use, trans)}
        >
          <span className="jp-gpudev-gpu-user-name">
            {holderLabel(use.holder, trans)}
          </span>
          {use.orphan && (
            <span className="jp-gpudev-badge jp-gpudev-badge-warn">
              {trans.__('left behind')}
            </span>
          )}
          <span className="jp-gpudev-gpu-user-use">
            {useText(use.use, trans)}
          </span>
        </li>
      ))}
    </ul>
  );
}
