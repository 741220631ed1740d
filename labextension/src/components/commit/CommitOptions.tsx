import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type {
  CommitModel,
  ICommitChoices,
  ICommitState
} from '../../models/commit';

/**
 * The options of a commit (write, verify, snapshot tag, push, message) and
 * its Commit button.
 */
export function CommitOptions({
  model,
  state,
  choices,
  onChange,
  onCommit,
  trans
}: {
  model: CommitModel;
  state: ICommitState;
  choices: ICommitChoices;
  onChange: (change: Partial<ICommitChoices>) => void;
  onCommit: () => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  const ids = {
    options: React.useId(),
    message: React.useId(),
    snapshot: React.useId(),
    snapshotHint: React.useId()
  };
  const committing = state.status === 'committing';
  const canCommit = model.canCommit(choices);
  return (
    <form
      className="jp-gpudev-commit-options"
      aria-labelledby={ids.options}
      onSubmit={event => {
        event.preventDefault();
        onCommit();
      }}
    >
      <h3 id={ids.options} className="jp-gpudev-section-heading">
        {trans.__('Commit')}
      </h3>
      <fieldset className="jp-gpudev-commit-fields" disabled={committing}>
        <label className="jp-gpudev-check">
          <input
            type="checkbox"
            data-testid="gpudev-commit-write"
            checked={choices.write}
            onChange={event => {
              onChange({ write: event.currentTarget.checked });
            }}
          />
          <span className="jp-gpudev-check-text">
            {trans.__('Write the Dockerfile into the workspace')}
          </span>
        </label>
        <label className="jp-gpudev-check">
          <input
            type="checkbox"
            data-testid="gpudev-commit-verify"
            checked={choices.verify}
            onChange={event => {
              onChange({ verify: event.currentTarget.checked });
            }}
          />
          <span className="jp-gpudev-check-text">
            {trans.__(
              'Verify: rebuild it and compare its packages with the container first'
            )}
          </span>
        </label>
        <label className="jp-gpudev-form-field" htmlFor={ids.snapshot}>
          <span className="jp-gpudev-field-label">
            {trans.__('Snapshot image tag (optional)')}
          </span>
          <input
            id={ids.snapshot}
            className="jp-gpudev-input jp-gpudev-form-input"
            data-testid="gpudev-commit-snapshot"
            type="text"
            spellCheck={false}
            autoComplete="off"
            placeholder="127.0.0.1:5000/team/env:v1"
            value={choices.snapshot}
            aria-describedby={ids.snapshotHint}
            onChange={event => {
              onChange({ snapshot: event.currentTarget.value });
            }}
            onKeyDown={event => {
              // Enter in the tag must not start a commit (or a push).
              if (event.key === 'Enter') {
                event.preventDefault();
              }
            }}
          />
          <span id={ids.snapshotHint} className="jp-gpudev-field-hint">
            {trans.__(
              'Commits the whole container as this image (driver files left out), labelled with the diff.'
            )}
          </span>
        </label>
        <label className="jp-gpudev-check">
          <input
            type="checkbox"
            data-testid="gpudev-commit-push"
            checked={choices.push}
            disabled={!choices.snapshot.trim()}
            onChange={event => {
              onChange({ push: event.currentTarget.checked });
            }}
          />
          <span className="jp-gpudev-check-text">
            {trans.__(
              'Push the snapshot to the registry its tag names (your docker login)'
            )}
          </span>
        </label>
        <label className="jp-gpudev-form-field" htmlFor={ids.message}>
          <span className="jp-gpudev-field-label">
            {trans.__('Message (optional)')}
          </span>
          <textarea
            id={ids.message}
            className="jp-gpudev-input jp-gpudev-form-input jp-gpudev-commit-message"
            data-testid="gpudev-commit-message"
            rows={2}
            value={choices.message}
            onChange={event => {
              onChange({ message: event.currentTarget.value });
            }}
          />
        </label>
      </fieldset>
      <div className="jp-gpudev-actions">
        <button
          type="submit"
          className={
            'jp-gpudev-button jp-gpudev-mod-accept' +
            (committing ? ' jp-gpudev-mod-busy' : '')
          }
          data-testid="gpudev-commit-run"
          disabled={!canCommit}
          aria-busy={committing}
          title={commitButtonTitle(state, choices, trans)}
        >
          {committing ? trans.__('Committing…') : trans.__('Commit')}
        </button>
      </div>
    </form>
  );
}

function commitButtonTitle(
  state: ICommitState,
  choices: ICommitChoices,
  trans: TranslationBundle
): string {
  if (state.refreshing) {
    return trans.__('Wait for the diff of the selected changes');
  }
  if (choices.push && !choices.snapshot.trim()) {
    return trans.__('A push needs a snapshot tag');
  }
  if (state.diff?.empty && !choices.snapshot.trim()) {
    return trans.__(
      'Nothing to write: select a change, or give a snapshot tag'
    );
  }
  if (!choices.write && !choices.verify && !choices.snapshot.trim()) {
    return trans.__('Choose what the commit does: write, verify or snapshot');
  }
  return trans.__('Commit the selected changes');
}
