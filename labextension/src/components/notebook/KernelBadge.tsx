import type { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { chipIcon } from '../../icons';
import type { KernelBadgeModel } from '../../models/kernelBadge';
import { useModelState } from '../common/hooks';
import {
  gpusText,
  kernelTooltip,
  kernelUsageText,
  kernelUsageTooltip,
  releaseLabel
} from './kernelText';
import { confirmAndRelease } from './ReleaseDialog';

/** The item: chip, container and GPUs (tooltip: the details), and the button. */
function KernelBadgeView({
  model,
  trans
}: {
  model: KernelBadgeModel;
  trans: TranslationBundle;
}): React.JSX.Element | null {
  const { info, indexes, releasing, usage } = useModelState(model);
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
      {usage && info.gpu_uuids.length > 0 && (
        <span
          className={
            'jp-gpudev-kernel-usage' +
            (usage.reason === null ? '' : ' jp-gpudev-mod-unknown')
          }
          data-testid="gpudev-kernel-usage"
          title={kernelUsageTooltip(usage, indexes, trans)}
        >
          {kernelUsageText(usage, trans)}
        </span>
      )}
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
 * box) while the notebook's kernel is not a gpudev one. It tells its model
 * whether it is on screen: the kernel's GPU use is polled only then.
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

  protected override onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._model.visible = this.isVisible;
  }

  protected override onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._model.visible = true;
  }

  protected override onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._model.visible = false;
  }

  protected override onBeforeDetach(msg: Message): void {
    this._model.visible = false;
    super.onBeforeDetach(msg);
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
