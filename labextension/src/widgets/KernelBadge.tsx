import { Dialog, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { toAPIError } from '../api';
import { chipIcon } from '../icons';
import type { IKernelInfo, KernelBadgeModel } from '../notebook';
import { notifyError } from './ErrorDetails';
import { useModelState } from './hooks';

/** Characters of a GPU UUID shown when its index is not known. */
const SHORT_UUID_LENGTH = 8;

/**
 * A GPU as short as it can be told apart: its index when known, else the
 * first characters of its UUID (`GPU-5d5ba0d6-...` -> `5d5ba0d6`; a MIG
 * instance keeps its `MIG-` prefix).
 */
export function gpuShortName(
  uuid: string,
  indexes: ReadonlyMap<string, number>
): string {
  const index = indexes.get(uuid);
  if (index !== undefined) {
    return String(index);
  }
  const match = /^(GPU-|MIG-)?(.*)$/.exec(uuid);
  const prefix = match?.[1] ?? '';
  const rest = (match?.[2] ?? uuid).slice(0, SHORT_UUID_LENGTH);
  return prefix === 'MIG-' ? `MIG-${rest}` : rest;
}

/** The GPUs of the kernel in a few characters: `GPU 0, 1` or `CPU only`. */
export function gpusText(
  info: IKernelInfo,
  indexes: ReadonlyMap<string, number>,
  trans: TranslationBundle
): string {
  if (info.gpu_uuids.length === 0) {
    return trans.__('CPU only');
  }
  return trans.__(
    'GPU %1',
    info.gpu_uuids.map(uuid => gpuShortName(uuid, indexes)).join(', ')
  );
}

/** The tooltip of the item: container, host, environment, full GPU UUIDs. */
export function kernelTooltip(
  info: IKernelInfo,
  indexes: ReadonlyMap<string, number>,
  trans: TranslationBundle
): string {
  const lines = [
    info.state
      ? trans.__(
          'GPU Dev kernel in dev container %1 (%2)',
          info.container,
          info.state
        )
      : trans.__('GPU Dev kernel in dev container %1', info.container),
    trans.__('Host: %1', info.host || trans.__('unknown')),
    trans.__('Environment: %1', info.environment || trans.__('unknown'))
  ];
  if (info.gpu_uuids.length === 0) {
    lines.push(trans.__('GPUs: none (CPU only)'));
  } else {
    lines.push(trans._n('GPU:', 'GPUs:', info.gpu_uuids.length));
    for (const uuid of info.gpu_uuids) {
      const index = indexes.get(uuid);
      lines.push(
        index === undefined
          ? `  ${uuid}`
          : `  ${trans.__('GPU %1', index)}: ${uuid}`
      );
    }
  }
  if (info.shared) {
    lines.push(trans.__('Shared: other kernels can run in this container too'));
  }
  return lines.join('\n');
}

/** The label of the release button. */
function releaseLabel(info: IKernelInfo, trans: TranslationBundle): string {
  return info.gpu_uuids.length > 0
    ? trans.__('Release GPU')
    : trans.__('Shut down kernel');
}

/** What the confirmation dialog of a release says will happen. */
function ReleaseDialogBody({
  info,
  indexes,
  trans
}: {
  info: IKernelInfo;
  indexes: ReadonlyMap<string, number>;
  trans: TranslationBundle;
}): React.JSX.Element {
  const gpus = gpusText(info, indexes, trans);
  const hasGPUs = info.gpu_uuids.length > 0;
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
      {info.shared ? (
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
  const { info, indexes, releasing } = model.state;
  if (!info || releasing) {
    return;
  }
  const label = releaseLabel(info, trans);
  const result = await showDialog({
    title:
      info.gpu_uuids.length > 0
        ? trans.__('Release the GPUs of %1?', info.container)
        : trans.__('Shut down the kernel in %1?', info.container),
    body: <ReleaseDialogBody info={info} indexes={indexes} trans={trans} />,
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

/** The item: chip, container and GPUs (tooltip: the details), and the button. */
function KernelBadgeView({
  model,
  trans
}: {
  model: KernelBadgeModel;
  trans: TranslationBundle;
}): React.JSX.Element | null {
  const { info, indexes, releasing } = useModelState(model);
  if (!info) {
    return null;
  }
  const gpus = gpusText(info, indexes, trans);
  const label = releaseLabel(info, trans);
  return (
    <div
      className="jp-gpudev-kernel"
      role="group"
      aria-label={trans.__('GPU Dev kernel: %1, %2', info.container, gpus)}
      data-container={info.container}
    >
      <span
        className="jp-gpudev-kernel-label"
        title={kernelTooltip(info, indexes, trans)}
        data-testid="gpudev-kernel-label"
      >
        <chipIcon.react tag="span" className="jp-gpudev-kernel-icon" />
        <span className="jp-gpudev-kernel-name">{info.container}</span>
        <span className="jp-gpudev-kernel-separator" aria-hidden="true">
          ·
        </span>
        <span className="jp-gpudev-kernel-gpus">{gpus}</span>
      </span>
      <button
        type="button"
        className="jp-gpudev-kernel-release"
        data-testid="gpudev-kernel-release"
        disabled={releasing}
        aria-busy={releasing}
        aria-label={
          info.gpu_uuids.length > 0
            ? trans.__(
                'Release GPU: shut the kernel down and free the GPUs of %1',
                info.container
              )
            : trans.__(
                'Shut down kernel: shut the kernel down and stop %1',
                info.container
              )
        }
        title={
          info.gpu_uuids.length > 0
            ? trans.__(
                'Shut the kernel down: its GPUs are freed and its dev container stopped'
              )
            : trans.__('Shut the kernel down: its dev container is stopped')
        }
        onClick={() => {
          void confirmAndRelease(model, trans);
        }}
      >
        {releasing ? trans.__('Releasing…') : label}
      </button>
    </div>
  );
}

/**
 * The notebook toolbar item of a gpudev kernel. It is hidden (not an empty
 * box) while the notebook's kernel is not a gpudev one.
 */
export class KernelBadge extends ReactWidget {
  constructor(options: KernelBadge.IOptions) {
    super();
    this._model = options.model;
    this._trans = options.trans;
    this.addClass('jp-gpudev-kernel-item');
    this.node.setAttribute('data-testid', 'gpudev-kernel-toolbar');
    this._syncHidden();
    this._model.stateChanged.connect(this._syncHidden);
  }

  override dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.stateChanged.disconnect(this._syncHidden);
    super.dispose();
  }

  protected render(): React.JSX.Element {
    return <KernelBadgeView model={this._model} trans={this._trans} />;
  }

  private readonly _syncHidden = (): void => {
    this.setHidden(this._model.state.info === null);
  };

  private readonly _model: KernelBadgeModel;
  private readonly _trans: TranslationBundle;
}

export namespace KernelBadge {
  export interface IOptions {
    model: KernelBadgeModel;
    trans: TranslationBundle;
  }
}
