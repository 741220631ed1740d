import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { IStartProgress } from '../../types';
import { ProgressBar } from '../common/ProgressBar';

function stageLabel(stage: string, trans: TranslationBundle): string {
  switch (stage) {
    case 'pull':
      return trans.__('Pulling the image');
    case 'build':
      return trans.__('Building the image');
    case 'lease':
      return trans.__('Leasing GPUs');
    case 'create':
      return trans.__('Creating');
    case 'start':
      return trans.__('Starting');
    case 'postCreateCommand':
      return trans.__('Running postCreateCommand');
    case 'postStartCommand':
      return trans.__('Running postStartCommand');
    case 'ready':
      return trans.__('Ready');
    default:
      return stage;
  }
}

/** The progress of a start, under its environment. */
export function StartProgress({
  environment,
  progress,
  trans
}: {
  environment: string;
  progress: IStartProgress | null;
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <div
      className="jp-gpudev-progress"
      data-testid={`gpudev-start-progress-${environment}`}
      data-stage={progress?.stage ?? ''}
      role="status"
      aria-live="polite"
    >
      <p className="jp-gpudev-progress-text">
        <span className="jp-gpudev-progress-stage">
          {progress
            ? stageLabel(progress.stage, trans)
            : trans.__('Contacting the server…')}
        </span>
        {progress?.message && (
          <span className="jp-gpudev-progress-message" title={progress.message}>
            {progress.message}
          </span>
        )}
      </p>
      <ProgressBar
        current={progress?.current}
        total={progress?.total}
        label={trans.__('Progress of %1', environment)}
        trans={trans}
      />
    </div>
  );
}
