import { Dialog, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { toAPIError } from '../../api/errors';
import type { KernelBadgeModel } from '../../models/kernelBadge';
import type { IKernelInfo, IKernelUsage } from '../../types';
import { notifyError } from '../common/ErrorDetails';
import { holdsText } from '../common/usageText';
import { gpusText, releaseLabel } from './kernelText';

/** What the confirmation dialog of a release says will happen. */
export function ReleaseDialogBody({
  info,
  indexes,
  usage,
  trans
}: {
  info: IKernelInfo;
  indexes: ReadonlyMap<string, number>;
  /** What the kernel holds on its GPUs, when known. */
  usage: IKernelUsage | null;
  trans: TranslationBundle;
}): React.JSX.Element {
  const gpus = gpusText(info, indexes, trans);
  const hasGPUs = info.gpu_uuids.length > 0;
  const holds =
    hasGPUs && usage && usage.reason === null
      ? holdsText(
          usage.gpus.map(gpu => ({
            ...gpu,
            index: gpu.index ?? indexes.get(gpu.uuid) ?? null
          })),
          trans
        )
      : '';
  return (
    <div
      className="jp-gpudev-release-dialog"
      data-testid="gpudev-release-dialog"
    >
      <p>
        {trans.__(
          "The notebook's kernel is shut down: what it holds in memory is lost."
        )}
      </p>
      {holds && (
        <p data-testid="gpudev-release-holds">
          {trans.__('It holds %1.', holds)}
        </p>
      )}
      {info.pod ? (
        <p>
          {info.shared
            ? trans.__(
                'Its dev container %1 is a shared pod: it keeps running while other kernels use it or while it is pinned; otherwise it is deleted, its GPUs freed and its workspace kept, unless files outside its workspace changed (then it keeps running until they are committed or it is removed).',
                info.container
              )
            : trans.__(
                'Its pod %1 is deleted, its GPUs freed and its workspace kept, unless files outside its workspace changed: then it keeps running, with its GPUs, until they are committed or it is removed.',
                info.container
              )}
        </p>
      ) : info.shared ? (
        <p>
          {hasGPUs
            ? trans.__(
                'Its dev container %1 is shared: it keeps running, with its GPUs (%2), while other kernels use it or while it is pinned; otherwise it is stopped and its GPUs are freed.',
                info.container,
                gpus
              )
            : trans.__(
                'Its dev container %1 is shared: it keeps running while other kernels use it or while it is pinned; otherwise it is stopped.',
                info.container
              )}
        </p>
      ) : (
        <p>
          {hasGPUs
            ? trans.__(
                'Its GPUs (%1) are freed for others, and its dev container %2 is stopped: removed, or kept if it has uncommitted changes (commit or discard them from the GPU Dev panel).',
                gpus,
                info.container
              )
            : trans.__(
                'Its dev container %1 is stopped: removed, or kept if it has uncommitted changes (commit or discard them from the GPU Dev panel).',
                info.container
              )}
        </p>
      )}
    </div>
  );
}

/**
 * Ask for confirmation, then shut the notebook's kernel down; a failure is
 * shown with `notifyError`.
 */
export async function confirmAndRelease(
  model: KernelBadgeModel,
  trans: TranslationBundle
): Promise<void> {
  const { info, indexes, releasing, usage } = model.state;
  if (!info || releasing) {
    return;
  }
  const label = releaseLabel(info, trans);
  const result = await showDialog({
    title:
      info.gpu_uuids.length > 0
        ? trans.__('Release the GPUs of %1?', info.container)
        : trans.__('Shut down the kernel in %1?', info.container),
    body: (
      <ReleaseDialogBody
        info={info}
        indexes={indexes}
        usage={usage}
        trans={trans}
      />
    ),
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      Dialog.warnButton({ label })
    ]
  });
  if (!result.button.accept || model.isDisposed) {
    return;
  }
  try {
    await model.release();
  } catch (reason) {
    notifyError(
      trans.__('GPU Dev: could not release the GPUs of %1', info.container),
      toAPIError(reason),
      trans
    );
  }
}
