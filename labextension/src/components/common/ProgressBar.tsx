import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

/**
 * A bar of how far measured work (a pull, a push) has got; nothing while
 * `current` or `total` is unknown.
 */
export function ProgressBar({
  current,
  total,
  label,
  trans
}: {
  current: number | null | undefined;
  total: number | null | undefined;
  /** Names the bar for assistive technologies. */
  label: string;
  trans: TranslationBundle;
}): React.JSX.Element | null {
  if (current === null || current === undefined || !total || total <= 0) {
    return null;
  }
  const fraction = Math.min(1, Math.max(0, current / total));
  return (
    <div
      className="jp-gpudev-bar"
      role="progressbar"
      aria-label={label}
      aria-valuemin={0}
      aria-valuemax={total}
      aria-valuenow={current}
      aria-valuetext={trans.__('%1%', Math.round(fraction * 100))}
    >
      <div
        className="jp-gpudev-bar-fill"
        style={{ width: `${(fraction * 100).toFixed(1)}%` }}
      />
    </div>
  );
}
