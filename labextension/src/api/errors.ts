import type { IErrorDetails, IHostInfo } from '../types';
import { isHostInfo, normaliseHost } from './hostShape';
import { isRecord } from './json';

/** `code` used when the server could not be reached at all. */
export const NETWORK_ERROR = 'network_error';

/** `code` used when the server answered something that is not our JSON. */
export const INVALID_RESPONSE = 'invalid_response';

/** `code` of an action refused because another one is under way. */
export const BUSY = 'busy';

/**
 * Any failure of a call to the gpudev API.
 *
 * `status` is the HTTP status (0 when no answer came back), `code` the
 * `error` field of the JSON body (or one of the codes above), and `details`
 * the structured `details` field when the server sent one.
 */
export class GPUDevAPIError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: IErrorDetails | null;

  constructor(options: GPUDevAPIError.IOptions) {
    super(options.message);
    this.name = 'GPUDevAPIError';
    this.status = options.status;
    this.code = options.code;
    this.details = options.details ?? null;
  }

  /** The hosts listed in `details.hosts`, when the body had a usable list. */
  get hosts(): IHostInfo[] {
    const hosts = this.details?.hosts;
    return Array.isArray(hosts)
      ? hosts.filter(isHostInfo).map(normaliseHost)
      : [];
  }

  /**
   * Why each host could not be used, by host name, when `details.hosts` maps
   * names to reasons (a start no host could take: 409 `no_host`); else `[]`.
   */
  get hostReasons(): [string, string][] {
    const hosts: unknown = this.details?.hosts;
    if (!isRecord(hosts)) {
      return [];
    }
    return Object.entries(hosts).filter(
      (entry): entry is [string, string] => typeof entry[1] === 'string'
    );
  }
}

export namespace GPUDevAPIError {
  export interface IOptions {
    status: number;
    code: string;
    message: string;
    details?: IErrorDetails | null;
  }
}

/** Wrap anything thrown into a `GPUDevAPIError` (returned as is if it is one). */
export function toAPIError(reason: unknown): GPUDevAPIError {
  if (reason instanceof GPUDevAPIError) {
    return reason;
  }
  return new GPUDevAPIError({
    status: 0,
    code: 'unexpected',
    message: describe(reason)
  });
}

/** An action refused because another one is under way (`code` `busy`). */
export function busyError(message: string): GPUDevAPIError {
  return new GPUDevAPIError({ status: 0, code: BUSY, message });
}

/** The message of anything thrown, for a sentence. */
export function describe(reason: unknown): string {
  if (reason instanceof Error) {
    return reason.message || reason.name;
  }
  return typeof reason === 'string' ? reason : 'unknown error';
}

/**
 * The one check of an answer's shape: `parse` makes the value the panel
 * reads of `body` (its fields filled in and of their types), or returns
 * `null` when `body` lacks what the panel relies on; then this throws an
 * `invalid_response` error saying that the server sent `what` in an
 * unexpected shape (or `options.message`).
 *
 * @param status - the HTTP status of the answer, for the error.
 */
export function checkShape<T>(
  body: unknown,
  parse: (value: unknown) => T | null,
  what: string,
  options: { status?: number; message?: string } = {}
): T {
  const value = parse(body);
  if (value === null) {
    throw new GPUDevAPIError({
      status: options.status ?? 200,
      code: INVALID_RESPONSE,
      message:
        options.message ?? `The server sent ${what} in an unexpected shape.`
    });
  }
  return value;
}
