import type { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import type { CommitModel } from '../../models/commit';
import { CommitView } from './CommitView';
import type { ICommitDefaults } from './CommitView';

export type { ICommitDefaults } from './CommitView';

/**
 * The commit dialog of one dev container, shown in the main area: its
 * changes with a checkbox each, the Dockerfile diff of those checked, the
 * options (write, verify, snapshot, push, message), the progress of the
 * commit and its outcome. The model is disposed with the widget.
 */
export class CommitPanel extends ReactWidget {
  constructor(options: CommitPanel.IOptions) {
    super();
    this.model = options.model;
    this._trans = options.trans;
    this._defaults = options.defaults ?? {};
    this.addClass('jp-gpudev-commit-panel');
    this.id = `gpudev-commit-${options.model.name}`;
    this.title.label = options.trans.__('Commit %1', options.model.name);
    this.title.caption = options.trans.__(
      'The changes of dev container %1 as a Dockerfile diff',
      options.model.name
    );
    this.title.closable = true;
  }

  readonly model: CommitModel;

  override dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  protected render(): React.JSX.Element {
    return (
      <CommitView
        model={this.model}
        defaults={this._defaults}
        trans={this._trans}
      />
    );
  }

  private readonly _trans: TranslationBundle;
  private readonly _defaults: ICommitDefaults;
}

export namespace CommitPanel {
  export interface IOptions {
    model: CommitModel;
    trans: TranslationBundle;
    defaults?: ICommitDefaults;
  }
}
