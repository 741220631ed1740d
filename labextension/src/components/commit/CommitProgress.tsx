import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { ICommitState } from '../../models/commit';
import type { ICommitResult } from '../../types';
import { ProgressBar } from '../common/ProgressBar';

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

/** The stage, the bar and the lines of a commit under way. */
export function CommitProgress({
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

/** What the last commit did. */
export function CommitOutcome({
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
