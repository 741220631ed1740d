import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type {
  IErrorBody,
  IErrorDetails,
  IHostInfo,
  IHostsResponse
} from './tokens';

/** Path of the REST API below the server's base URL. */
export const API_PATH = 'gpudev/api';

/** `code` used when the server could not be reached at all. */
export const NETWORK_ERROR = 'network_error';

/** `code` used when the server answered something that is not our JSON. */
export const INVALID_RESPONSE = 'invalid_response';

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
    return Array.isArray(hosts) ? hosts.filter(isHostInfo) : [];
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

/**
 * Call the gpudev API and return the parsed JSON body.
 *
 * @param path - segments below `gpudev/api`; each is URL-encoded.
 * @param init - the fetch options (method, body...).
 * @param settings - the server connection; defaults to the page's.
 * @throws {GPUDevAPIError} on a network failure, an error status, or a body
 *   that is not JSON.
 */
export async function requestAPI<T>(
  path: readonly string[],
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(
    settings.baseUrl,
    API_PATH,
    ...path.map(segment => encodeURIComponent(segment))
  );

  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (reason) {
    throw new GPUDevAPIError({
      status: 0,
      code: NETWORK_ERROR,
      message: `Could not reach the Jupyter server (${describe(reason)}). Check that it is still running.`
    });
  }

  let text: string;
  try {
    text = await response.text();
  } catch (reason) {
    throw new GPUDevAPIError({
      status: response.status,
      code: NETWORK_ERROR,
      message: `The connection to the Jupyter server broke while reading its answer (${describe(reason)}).`
    });
  }

  let body: unknown = undefined;
  let parsed = false;
  if (text.length > 0) {
    try {
      body = JSON.parse(text);
      parsed = true;
    } catch {
      parsed = false;
    }
  }

  if (!response.ok) {
    throw errorFromBody(response, parsed ? body : undefined);
  }
  if (!parsed) {
    throw new GPUDevAPIError({
      status: response.status,
      code: INVALID_RESPONSE,
      message: `The server answered ${url} with something that is not JSON (is the jupyter-gpudev server extension enabled?).`
    });
  }
  return body as T;
}

/** `GET /gpudev/api/hosts`: every configured host with its engine and GPUs. */
export async function fetchHosts(
  settings?: ServerConnection.ISettings
): Promise<IHostsResponse> {
  const body = await requestAPI<unknown>(
    ['hosts'],
    { method: 'GET' },
    settings
  );
  if (!isRecord(body) || !Array.isArray(body.hosts)) {
    throw new GPUDevAPIError({
      status: 200,
      code: INVALID_RESPONSE,
      message: 'The server sent a host list in an unexpected shape.'
    });
  }
  return { hosts: body.hosts.filter(isHostInfo) };
}

/** `GET /gpudev/api/hosts/<name>`: one host. */
export async function fetchHost(
  name: string,
  settings?: ServerConnection.ISettings
): Promise<IHostInfo> {
  const body = await requestAPI<unknown>(
    ['hosts', name],
    { method: 'GET' },
    settings
  );
  if (!isHostInfo(body)) {
    throw new GPUDevAPIError({
      status: 200,
      code: INVALID_RESPONSE,
      message: `The server sent host "${name}" in an unexpected shape.`
    });
  }
  return body;
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

/** True when `value` has the fields the panel relies on to draw a host. */
export function isHostInfo(value: unknown): value is IHostInfo {
  return (
    isRecord(value) &&
    typeof value.name === 'string' &&
    typeof value.reachable === 'boolean' &&
    isRecord(value.gpus) &&
    Array.isArray(value.gpus.gpus)
  );
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

function describe(reason: unknown): string {
  if (reason instanceof Error) {
    return reason.message || reason.name;
  }
  return typeof reason === 'string' ? reason : 'unknown error';
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
