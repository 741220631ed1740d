import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { CommitModel, ICommitState } from '../../models/commit';
import type { IChangeItem, IContainerDiff } from '../../types';

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

function countExcluded(
  items: readonly IChangeItem[],
  excluded: ReadonlySet<string>
): number {
  return items.filter(item => excluded.has(item.id)).length;
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

/** The changes of the diff, each with a checkbox, and what is not written. */
export function ChangesSection({
  model,
  state,
  diff,
  trans
}: {
  model: CommitModel;
  state: ICommitState;
  diff: IContainerDiff;
  trans: TranslationBundle;
}): React.JSX.Element {
  const headingId = React.useId();
  const committing = state.status === 'committing';
  const items = diff.items;
  return (
    <section className="jp-gpudev-commit-changes" aria-labelledby={headingId}>
      <div className="jp-gpudev-section-header">
        <h3 id={headingId} className="jp-gpudev-section-heading">
          {trans.__('Changes')}
          <span className="jp-gpudev-count">
            {items.length - countExcluded(items, state.excluded)}/{items.length}
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
        <p className="jp-gpudev-message" data-testid="gpudev-commit-empty">
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
      {diff.reported.length > 0 && (
        <div className="jp-gpudev-commit-reported">
          <h4 className="jp-gpudev-section-title">{trans.__('Not written')}</h4>
          <ul className="jp-gpudev-warnings">
            {diff.reported.map((line, i) => (
              <li key={i}>{line}</li>
            ))}
          </ul>
        </div>
      )}
    </section>
  );
}
