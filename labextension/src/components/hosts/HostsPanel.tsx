import { nullTranslator } from '@jupyterlab/translation';
import type { ITranslator, TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { PANEL_ID, TRANSLATION_DOMAIN } from '../../constants';
import { chipIcon } from '../../icons';
import type { ContainersModel } from '../../models/containers';
import type { HostsModel } from '../../models/hosts';
import type { ReclaimsModel } from '../../models/reclaims';
import type { UsageModel } from '../../models/usage';
import type { OpenContainerView, OpenTerminal } from '../containers/types';
import { HostsView } from './HostsView';

/**
 * The left sidebar panel: every Docker host with its engine and GPUs, then
 * (given a `ContainersModel`) the environments and the dev containers.
 */
export class HostsPanel extends ReactWidget {
  constructor(options: HostsPanel.IOptions) {
    super();
    this.model = options.model;
    this.containers = options.containers ?? null;
    this.reclaims = options.reclaims ?? null;
    this.usage = options.usage ?? null;
    this._openTerminal = options.openTerminal;
    this._openView = options.openView;
    this._trans = (options.translator ?? nullTranslator).load(
      TRANSLATION_DOMAIN
    );
    this.id = PANEL_ID;
    this.addClass('jp-gpudev-panel');
    this.title.icon = chipIcon;
    this.title.caption = this._trans.__('GPU Dev');
  }

  /** The hosts shown by the panel. */
  readonly model: HostsModel;

  /** The environments and dev containers shown below the hosts, if any. */
  readonly containers: ContainersModel | null;

  /**
   * The idle GPU kernels about to be released, shown in their container's
   * row. Its poll goes on while the panel is hidden (the panel does not
   * drive it).
   */
  readonly reclaims: ReclaimsModel | null;

  /**
   * The GPUs' use by process, shown on the host cards and in the dev
   * containers' rows; polled while the panel is visible.
   */
  readonly usage: UsageModel | null;

  protected override onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    // Shown before the shell was attached (a restored layout, an early
    // command): no after-show message comes then, so check here.
    this._setVisible(this.isVisible);
  }

  protected override onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._setVisible(true);
  }

  protected override onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._setVisible(false);
  }

  protected override onBeforeDetach(msg: Message): void {
    this._setVisible(false);
    super.onBeforeDetach(msg);
  }

  protected render(): React.JSX.Element {
    return (
      <HostsView
        model={this.model}
        containers={this.containers}
        reclaims={this.reclaims}
        usage={this.usage}
        openTerminal={this._openTerminal}
        openView={this._openView}
        trans={this._trans}
      />
    );
  }

  private _setVisible(visible: boolean): void {
    this.model.visible = visible;
    if (this.containers) {
      this.containers.visible = visible;
    }
    if (this.usage) {
      this.usage.visible = visible;
    }
  }

  private readonly _trans: TranslationBundle;
  private readonly _openTerminal: OpenTerminal | undefined;
  private readonly _openView: OpenContainerView | undefined;
}

export namespace HostsPanel {
  export interface IOptions {
    model: HostsModel;
    /** Adds the Environments and Dev containers sections. */
    containers?: ContainersModel;
    /**
     * Adds, in the Dev containers section, a warning with Keep and Release
     * now buttons to the row of each container whose idle GPU kernel is
     * about to be released.
     */
    reclaims?: ReclaimsModel;
    /**
     * Adds each GPU's use by owner to the host cards, and each running
     * container's use of its GPUs to its row.
     */
    usage?: UsageModel;
    /**
     * Opens a Jupyter terminal by its name in the main area; gives running
     * dev containers a Terminal button.
     */
    openTerminal?: OpenTerminal;
    /**
     * Opens the commit dialog or the logs of a dev container in the main
     * area; gives containers Commit, Push and Logs buttons.
     */
    openView?: OpenContainerView;
    translator?: ITranslator;
  }
}
