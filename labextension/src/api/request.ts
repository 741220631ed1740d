/**
 * The one way the API client talks to the server: URLs below
 * `gpudev/api`, `ServerConnection.makeRequest`, and every failure (no
 * answer, an error status, a body that is not JSON, a body of the wrong
 * shape) turned into a `GPUDevAPIError`.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { API_PATH } from '../constants';
import type { IErrorBody } from '../types';
import {
  checkShape,
  describe,
  GPUDevAPIError,
  INVALID_RESPONSE,
  NETWORK_ERROR
} from './errors';
import { isRecord, parseJSON } from './json';

/** Query parameters; a list repeats its key (`?b=x&b=y`). */
export type Query = Readonly<Record<string, string | readonly string[]>>;

/** What a call sends besides its path. */
export interface IRequestOptions {
  /** The fetch options (method, body, signal...). */
  init?: RequestInit;
  /** The server connection; defaults to the page's. */
  settings?: ServerConnection.ISettings;
  query?: Query;
}

/**
 * Call the gpudev API and return the parsed JSON body.
 *
 * @param path - segments below `gpudev/api`; each is URL-encoded.
 * @param init - the fetch options (method, body...).
 * @param settings - the server connection; defaults to the page's.
 * @param query - query parameters, e.g. `{ force: '1' }`.
 * @throws {GPUDevAPIError} on a network failure, an error status, or a body
 *   that is not JSON.
 */
export async function requestAPI<T>(
  path: readonly string[],
  init: RequestInit = {},
  settings?: ServerConnection.ISettings,
  query: Query = {}
): Promise<T> {
  const { body } = await requestJSON(path, { init, settings, query });
  return body as T;
}

/**
 * Call the gpudev API and check the shape of its JSON answer with
 * `parse` (see `checkShape`).
 */
export async function requestShaped<T>(
  path: readonly string[],
  parse: (value: unknown) => T | null,
  what: string,
  options: IRequestOptions = {}
): Promise<T> {
  const { status, body } = await requestJSON(path, options);
  return checkShape(body, parse, what, { status });
}

/** Call the gpudev API for an answer without a body (204); throw an error answer's error. */
export async function requestNoContent(
  path: readonly string[],
  options: IRequestOptions = {}
): Promise<void> {
  const { response } = await send(path, options);
  await throwUnlessOK(response);
}

/** The status and parsed JSON body of a successful call. */
async function requestJSON(
  path: readonly string[],
  options: IRequestOptions
): Promise<{ status: number; body: unknown }> {
  const { url, response } = await send(path, options);
  const body = parseJSON(await readText(response));
  if (!response.ok) {
    throw errorFromBody(response, body.parsed ? body.value : undefined);
  }
  if (!body.parsed) {
    throw new GPUDevAPIError({
      status: response.status,
      code: INVALID_RESPONSE,
      message: `The server answered ${url} with something that is not JSON (is the jupyter-gpudev server extension enabled?).`
    });
  }
  return { status: response.status, body: body.value };
}

/** Send one request to the API; a network failure becomes a `GPUDevAPIError`. */
export async function send(
  path: readonly string[],
  options: IRequestOptions = {}
): Promise<{ url: string; response: Response }> {
  const settings = options.settings ?? ServerConnection.makeSettings();
  const url =
    URLExt.join(
      settings.baseUrl,
      API_PATH,
      ...path.map(segment => encodeURIComponent(segment))
    ) + queryString(options.query ?? {});

  try {
    const response = await ServerConnection.makeRequest(
      url,
      options.init ?? {},
      settings
    );
    return { url, response };
  } catch (reason) {
    throw new GPUDevAPIError({
      status: 0,
      code: NETWORK_ERROR,
      message: `Could not reach the Jupyter server (${describe(reason)}). Check that it is still running.`
    });
  }
}

/** `?a=1&b=x&b=y` (a list repeats its key); empty without parameters. */
function queryString(query: Query): string {
  const parts: string[] = [];
  for (const [key, value] of Object.entries(query)) {
    for (const item of typeof value === 'string' ? [value] : value) {
      parts.push(`${encodeURIComponent(key)}=${encodeURIComponent(item)}`);
    }
  }
  return parts.length > 0 ? `?${parts.join('&')}` : '';
}

/** The body of an answer as text; a broken connection becomes a `GPUDevAPIError`. */
export async function readText(response: Response): Promise<string> {
  try {
    return await response.text();
  } catch (reason) {
    throw new GPUDevAPIError({
      status: response.status,
      code: NETWORK_ERROR,
      message: `The connection to the Jupyter server broke while reading its answer (${describe(reason)}).`
    });
  }
}

/** Throw the error an answer with an error status tells; nothing for a success. */
export async function throwUnlessOK(response: Response): Promise<void> {
  if (!response.ok) {
    const body = parseJSON(await readText(response));
    throw errorFromBody(response, body.parsed ? body.value : undefined);
  }
}

function errorFromBody(response: Response, body: unknown): GPUDevAPIError {
  const status = response.status;
  if (isRecord(body)) {
    const candidate = body as Partial<IErrorBody> & Record<string, unknown>;
    const message =
      typeof candidate.message === 'string' && candidate.message
        ? candidate.message
        : typeof candidate.reason === 'string' && candidate.reason
          ? candidate.reason
          : statusMessage(response);
    return new GPUDevAPIError({
      status,
      code:
        typeof candidate.error === 'string'
          ? candidate.error
          : `http_${status}`,
      message,
      details: isRecord(candidate.details) ? candidate.details : null
    });
  }
  return new GPUDevAPIError({
    status,
    code: `http_${status}`,
    message: statusMessage(response)
  });
}

function statusMessage(response: Response): string {
  const text = response.statusText ? ` ${response.statusText}` : '';
  if (response.status === 404) {
    return `The server answered 404${text}: the gpudev API was not found (is the jupyter-gpudev server extension enabled?).`;
  }
  return `The server answered ${response.status}${text}.`;
}
