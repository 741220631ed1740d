/**
 * Helpers reading untyped JSON values: each tells whether a value has a
 * type, or gives it a usable value of that type. They import nothing, so
 * every module of the API client can use them.
 */

/** True for a JSON object (not `null`, not an array). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The strings of `value` when it is an array (anything else left out); else `[]`. */
export function stringArray(value: unknown): string[] {
  return Array.isArray(value)
    ? value.filter((item): item is string => typeof item === 'string')
    : [];
}

/** `value` when it is a non-empty string; else `null`. */
export function textOrNull(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

/** `value` when it is a string; else `''`. */
export function text(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

/** `value` when it is a finite number; else `null`. */
export function finiteOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** True for a TCP port number (an integer from 1 to 65535). */
export function isPortNumber(value: unknown): value is number {
  return (
    typeof value === 'number' &&
    Number.isInteger(value) &&
    value >= 1 &&
    value <= 65535
  );
}

/** The parsed JSON of `text`, or `parsed: false` for empty or invalid text. */
export function parseJSON(
  text: string
): { parsed: true; value: unknown } | { parsed: false } {
  if (text.length === 0) {
    return { parsed: false };
  }
  try {
    return { parsed: true, value: JSON.parse(text) as unknown };
  } catch {
    return { parsed: false };
  }
}
