import type { TranslationBundle } from '@jupyterlab/translation';

/** An ISO 8601 date as the local date and time, or the text as is. */
export function localTime(iso: string): string {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
}

/**
 * How long ago `iso` was, in a few words: `<1 min`, `12 min`, `3 h 5 min`,
 * `2 d 4 h`; empty for a date that cannot be read.
 */
export function durationSince(
  iso: string,
  trans: TranslationBundle,
  now: number = Date.now()
): string {
  const start = new Date(iso).getTime();
  if (Number.isNaN(start)) {
    return '';
  }
  const minutes = Math.max(0, Math.floor((now - start) / 60000));
  if (minutes < 1) {
    return trans.__('<1 min');
  }
  if (minutes < 60) {
    return trans.__('%1 min', minutes);
  }
  const hours = Math.floor(minutes / 60);
  if (hours < 24) {
    return trans.__('%1 h %2 min', hours, minutes % 60);
  }
  return trans.__('%1 d %2 h', Math.floor(hours / 24), hours % 24);
}
