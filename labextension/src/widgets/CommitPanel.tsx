import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import * as React from 'react';

import { toAPIError } from '../api';
import type { CommitModel, ICommitChoices, ICommitState } from '../model';
import type { IChangeItem, ICommitResult, IContainerDiff } from '../tokens';
import { notifyError } from './ErrorDetails';
import { useModelState } from './hooks';
import { ProgressBar } from './ProgressBar';

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

/** The words of a kind of change, for its badge. */
function kindLabel(kind: string, trans: TranslationBundle): string {
  switch (kind) {
    case 'apt':
      return trans.__('apt');
    case 'python':
      return trans.__('pip');
    case 'conda':
      return trans.__('conda');
    case 'file':
      return trans.__('file');
    case 'delete':
      return trans.__('deleted');
    case 'env':
      return trans.__('ENV');
    default:
      return kind;
  }
}

function stageLabel(stage: string, trans: TranslationBundle): string {
  switch (stage) {
    case 'capture':
      return trans.__('Reading the changes');
    case 'verify':
    case 'build':
      return trans.__('Verifying: rebuilding the patched Dockerfile');
    case 'snapshot':
      return trans.__('Committing the snapshot image');
    case 'push':
      return trans.__('Pushing');
    case 'write':
      return trans.__('Writing the Dockerfile');
    case 'done':
      return trans.__('Done');
    default:
      return stage;
  }
}

function CommitView({
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
    changes: React.useId(),
    diff: React.useId(),
    options: React.useId(),
    message: React.useId(),
    snapshot: React.useId(),
    snapshotHint: React.useId()
  };

  React.useEffect(() => {
    void model.refresh();
  }, [model]);

  const update = (change: Partial<ICommitChoices>): void => {
    setChoices(previous => ({ ...previous, ...change }));
  };
  const committing = state.status === 'committing';
  const items = state.diff?.items ?? [];
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
          <section
            className="jp-gpudev-commit-changes"
            aria-labelledby={ids.changes}
          >
            <div className="jp-gpudev-section-header">
              <h3 id={ids.changes} className="jp-gpudev-section-heading">
                {trans.__('Changes')}
                <span className="jp-gpudev-count">
                  {items.length - countExcluded(items, state.excluded)}/
                  {items.length}
                </span>
              </h3>
              {items.length > 1 && (
                <span className="jp-gpudev-commit-select">
                  <button
                    type="button"
                    className="jp-gpudev-button jp-gpudev-mod-small"
                    data-testid="gpudev-commit-all"
                    disabled={committing}
                    onClick={() => {
                      model.setAllIncluded(true);
                    }}
                  >
                    {trans.__('All')}
                  </button>
                  <button
                    type="button"
                    className="jp-gpudev-button jp-gpudev-mod-small"
                    data-testid="gpudev-commit-none"
                    disabled={committing}
                    onClick={() => {
                      model.setAllIncluded(false);
                    }}
                  >
                    {trans.__('None')}
                  </button>
                </span>
              )}
            </div>
            {items.length === 0 ? (
              <p
                className="jp-gpudev-message"
                data-testid="gpudev-commit-empty"
              >
                {trans.__(
                  'No changes: the container is as its image (or its last commit) left it.'
                )}
              </p>
            ) : (
              <ul
                className="jp-gpudev-commit-items"
                aria-label={trans.__('Changes to commit')}
              >
                {items.map(item => (
                  <ChangeRow
                    key={item.id}
                    item={item}
                    included={!state.excluded.has(item.id)}
                    disabled={committing}
                    onChange={included => {
                      model.setIncluded(item.id, included);
                    }}
                    trans={trans}
                  />
                ))}
              </ul>
            )}
            {state.diff.reported.length > 0 && (
              <div className="jp-gpudev-commit-reported">
                <h4 className="jp-gpudev-section-title">
                  {trans.__('Not written')}
                </h4>
                <ul className="jp-gpudev-warnings">
                  {state.diff.reported.map((line, i) => (
                    <li key={i}>{line}</li>
                  ))}
                </ul>
              </div>
            )}
          </section>

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

          <form
            className="jp-gpudev-commit-options"
            aria-labelledby={ids.options}
            onSubmit={event => {
              event.preventDefault();
              commit();
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
                    update({ write: event.currentTarget.checked });
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
                    update({ verify: event.currentTarget.checked });
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
                    update({ snapshot: event.currentTarget.value });
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
                    update({ push: event.currentTarget.checked });
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
                    update({ message: event.currentTarget.value });
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

function countExcluded(
  items: readonly IChangeItem[],
  excluded: ReadonlySet<string>
): number {
  return items.filter(item => excluded.has(item.id)).length;
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

function ChangeRow({
  item,
  included,
  disabled,
  onChange,
  trans
}: {
  item: IChangeItem;
  included: boolean;
  disabled: boolean;
  onChange: (included: boolean) => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <li
      className={
        'jp-gpudev-commit-item' + (included ? '' : ' jp-gpudev-mod-excluded')
      }
      data-testid={`gpudev-change-${item.id}`}
      data-kind={item.kind}
    >
      <label className="jp-gpudev-check" title={item.detail}>
        <input
          type="checkbox"
          checked={included}
          disabled={disabled}
          aria-label={trans.__('Commit %1', item.label)}
          onChange={event => {
            onChange(event.currentTarget.checked);
          }}
        />
        <span className={`jp-gpudev-kind jp-gpudev-kind-${item.kind}`}>
          {kindLabel(item.kind, trans)}
        </span>
        <span className="jp-gpudev-commit-item-label">{item.label}</span>
        <span className="jp-gpudev-commit-item-detail">{item.detail}</span>
      </label>
    </li>
  );
}

/** A unified diff with its added and removed lines marked. */
function DiffView({
  diff,
  stale,
  trans
}: {
  diff: IContainerDiff;
  stale: boolean;
  trans: TranslationBundle;
}): React.JSX.Element {
  if (!diff.diff) {
    return (
      <p className="jp-gpudev-message" data-testid="gpudev-commit-diff-empty">
        {trans.__('Nothing would be written to the Dockerfile.')}
      </p>
    );
  }
  return (
    <pre
      className={'jp-gpudev-diff' + (stale ? ' jp-gpudev-mod-stale' : '')}
      data-testid="gpudev-commit-diff"
      tabIndex={0}
      aria-label={trans.__('Dockerfile diff')}
    >
      {diff.diff.split('\n').map((line, i) => (
        <span key={i} className={diffLineClass(line)}>
          {line || ' '}
        </span>
      ))}
    </pre>
  );
}

function diffLineClass(line: string): string {
  if (line.startsWith('+++') || line.startsWith('---')) {
    return 'jp-gpudev-diff-file';
  }
  if (line.startsWith('@@')) {
    return 'jp-gpudev-diff-hunk';
  }
  if (line.startsWith('+')) {
    return 'jp-gpudev-diff-add';
  }
  if (line.startsWith('-')) {
    return 'jp-gpudev-diff-del';
  }
  return 'jp-gpudev-diff-context';
}

function CommitProgress({
  state,
  trans
}: {
  state: ICommitState;
  trans: TranslationBundle;
}): React.JSX.Element {
  const logRef = React.useRef<HTMLPreElement>(null);
  const progress = state.progress;
  React.useEffect(() => {
    const log = logRef.current;
    if (log) {
      log.scrollTop = log.scrollHeight;
    }
  }, [state.log]);
  return (
    <section
      className="jp-gpudev-progress jp-gpudev-commit-progress"
      data-testid="gpudev-commit-progress"
      data-stage={progress?.stage ?? ''}
    >
      <p className="jp-gpudev-progress-text" role="status" aria-live="polite">
        <span className="jp-gpudev-progress-stage">
          {progress
            ? stageLabel(progress.stage, trans)
            : trans.__('Contacting the server…')}
        </span>
      </p>
      <ProgressBar
        current={progress?.current}
        total={progress?.total}
        label={trans.__('Progress of the push')}
        trans={trans}
      />
      {state.log.length > 0 && (
        <pre
          ref={logRef}
          className="jp-gpudev-log"
          data-testid="gpudev-commit-log"
          tabIndex={0}
          aria-label={trans.__('Progress of the commit')}
        >
          {state.log.join('\n')}
        </pre>
      )}
    </section>
  );
}

function CommitOutcome({
  result,
  trans
}: {
  result: ICommitResult;
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <section
      className="jp-gpudev-commit-outcome"
      data-testid="gpudev-commit-outcome"
      role="status"
    >
      <h3 className="jp-gpudev-section-heading">{trans.__('Committed')}</h3>
      <dl className="jp-gpudev-facts">
        <dt>{trans.__('Dockerfile')}</dt>
        <dd data-testid="gpudev-commit-written">
          {result.written ?? trans.__('not written')}
        </dd>
        {result.verify && (
          <>
            <dt>{trans.__('Verify')}</dt>
            <dd>
              {result.verify.ok
                ? trans.__(
                    'the rebuilt image has the container’s packages (%1 s)',
                    result.verify.seconds
                  )
                : trans.__(
                    '%1 difference(s)',
                    result.verify.differences.length
                  )}
            </dd>
          </>
        )}
        {result.snapshot && (
          <>
            <dt>{trans.__('Snapshot')}</dt>
            <dd data-testid="gpudev-commit-snapshot-ref">
              {result.snapshot.reference}
            </dd>
            <dt>{trans.__('Pushed')}</dt>
            <dd data-testid="gpudev-commit-pushed">
              {result.snapshot.pushed
                ? (result.snapshot.digest ?? trans.__('yes'))
                : trans.__('no')}
            </dd>
          </>
        )}
      </dl>
    </section>
  );
}

/** One sentence saying what a commit did. */
export function commitSummary(
  name: string,
  result: ICommitResult,
  trans: TranslationBundle
): string {
  const parts: string[] = [];
  if (result.written) {
    parts.push(trans.__('wrote %1', result.dockerfile));
  }
  if (result.verify?.ok) {
    parts.push(trans.__('verified'));
  }
  if (result.snapshot) {
    parts.push(
      result.snapshot.pushed
        ? trans.__('pushed %1', result.snapshot.reference)
        : trans.__('tagged %1', result.snapshot.reference)
    );
  }
  return parts.length > 0
    ? trans.__('GPU Dev: commit of %1 done: %2', name, parts.join(', '))
    : trans.__('GPU Dev: commit of %1 done', name);
}
