import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { IContainerDiff } from '../../types';

/** A unified diff with its added and removed lines marked. */
export function DiffView({
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
