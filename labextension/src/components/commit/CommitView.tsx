import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { toAPIError } from '../../api/errors';
import type { CommitModel, ICommitChoices } from '../../models/commit';
import { notifyError } from '../common/ErrorDetails';
import { useModelState } from '../common/hooks';
import { ChangesSection } from './ChangeList';
import { CommitOptions } from './CommitOptions';
import { commitSummary, CommitOutcome, CommitProgress } from './CommitProgress';
import { DiffView } from './DiffView';

/** What the commit dialog starts with (the panel's Push opens it with a tag). */
export interface ICommitDefaults {
  /** Write the Dockerfile (default true). */
  write?: boolean;
  /** Rebuild the patched Dockerfile and compare its packages first. */
  verify?: boolean;
  /** A snapshot tag to fill in. */
  snapshot?: string;
  /** Push the snapshot. */
  push?: boolean;
}

/**
 * The commit dialog: header, error, then (once a diff was read) the
 * changes, the diff, the options, the progress and the outcome.
 */
export function CommitView({
  model,
  defaults,
  trans
}: {
  model: CommitModel;
  defaults: ICommitDefaults;
  trans: TranslationBundle;
}): React.JSX.Element {
  const state = useModelState(model);
  const [choices, setChoices] = React.useState<ICommitChoices>(() => ({
    write: defaults.write ?? true,
    verify: defaults.verify ?? false,
    snapshot: defaults.snapshot ?? '',
    push: defaults.push ?? false,
    message: ''
  }));
  const ids = {
    diff: React.useId()
  };

  React.useEffect(() => {
    void model.refresh();
  }, [model]);

  const update = (change: Partial<ICommitChoices>): void => {
    setChoices(previous => ({ ...previous, ...change }));
  };
  const committing = state.status === 'committing';
  const canCommit = model.canCommit(choices);

  const commit = (): void => {
    if (!canCommit) {
      return;
    }
    model.commit(choices).then(
      result => {
        Notification.success(commitSummary(model.name, result, trans), {
          autoClose: 8000
        });
      },
      (reason: unknown) => {
        notifyError(
          trans.__('GPU Dev: the commit of %1 failed', model.name),
          toAPIError(reason),
          trans
        );
      }
    );
  };

  return (
    <div className="jp-gpudev-commit" data-testid="gpudev-commit">
      <header className="jp-gpudev-commit-header">
        <h2 className="jp-gpudev-commit-title">
          {trans.__('Commit %1', model.name)}
        </h2>
        {state.diff && (
          <p className="jp-gpudev-commit-target">
            {state.diff.created
              ? trans.__('Creates %1', state.diff.dockerfile)
              : trans.__('Patches %1', state.diff.dockerfile)}
          </p>
        )}
        <button
          type="button"
          className={
            'jp-gpudev-button' + (state.refreshing ? ' jp-gpudev-mod-busy' : '')
          }
          data-testid="gpudev-commit-refresh"
          disabled={committing}
          aria-busy={state.refreshing}
          title={trans.__('Read the changes of the container again')}
          onClick={() => {
            void model.refresh();
          }}
        >
          {trans.__('Refresh')}
        </button>
      </header>

      {state.status === 'loading' && (
        <p className="jp-gpudev-message" role="status">
          {trans.__('Reading the changes of %1…', model.name)}
        </p>
      )}
      {state.error && (
        <div
          className="jp-gpudev-error"
          role="alert"
          data-testid="gpudev-commit-error"
        >
          <p className="jp-gpudev-error-title">
            {state.status === 'error'
              ? trans.__('Could not read the changes')
              : state.error.code === 'diff_changed'
                ? trans.__(
                    'The changes moved since they were shown: review them again'
                  )
                : trans.__('The last attempt failed')}
          </p>
          <p className="jp-gpudev-error-message">{state.error.message}</p>
        </div>
      )}

      {state.diff && (
        <div className="jp-gpudev-commit-body">
          <ChangesSection
            model={model}
            state={state}
            diff={state.diff}
            trans={trans}
          />

          <section
            className="jp-gpudev-commit-diff"
            aria-labelledby={ids.diff}
            aria-busy={state.refreshing}
          >
            <h3 id={ids.diff} className="jp-gpudev-section-heading">
              {trans.__('Dockerfile diff')}
            </h3>
            <DiffView
              diff={state.diff}
              stale={state.refreshing}
              trans={trans}
            />
          </section>

          <CommitOptions
            model={model}
            state={state}
            choices={choices}
            onChange={update}
            onCommit={commit}
            trans={trans}
          />

          {(committing || state.log.length > 0) && (
            <CommitProgress state={state} trans={trans} />
          )}
          {state.status !== 'committing' && state.result && (
            <CommitOutcome result={state.result} trans={trans} />
          )}
        </div>
      )}
    </div>
  );
}
