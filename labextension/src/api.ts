import { PageConfig, URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type {
  HostOrigin,
  IAddHostRequest,
  IChangeItem,
  ICommitProgress,
  ICommitRequest,
  ICommitResult,
  IContainerDiff,
  IContainerTerminal,
  IContainersResponse,
  IDevContainer,
  IEnvironment,
  IEnvironmentProblem,
  IEnvironmentsResponse,
  IErrorBody,
  IErrorDetails,
  IGPULease,
  IHostInfo,
  IHostsResponse,
  IReclaim,
  IReclaimsResponse,
  IStartProgress,
  IStartRequest
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
  settings: ServerConnection.ISettings = ServerConnection.makeSettings(),
  query: Readonly<Record<string, string>> = {}
): Promise<T> {
  const { url, response } = await send(path, init, settings, query);
  const text = await readText(response);
  const body = parseJSON(text);

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
  return body.value as T;
}

/** Send one request to the API; a network failure becomes a `GPUDevAPIError`. */
async function send(
  path: readonly string[],
  init: RequestInit,
  settings: ServerConnection.ISettings,
  query: Readonly<Record<string, string | readonly string[]>> = {}
): Promise<{ url: string; response: Response }> {
  const url =
    URLExt.join(
      settings.baseUrl,
      API_PATH,
      ...path.map(segment => encodeURIComponent(segment))
    ) + queryString(query);

  try {
    const response = await ServerConnection.makeRequest(url, init, settings);
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
function queryString(
  query: Readonly<Record<string, string | readonly string[]>>
): string {
  const parts: string[] = [];
  for (const [key, value] of Object.entries(query)) {
    for (const item of typeof value === 'string' ? [value] : value) {
      parts.push(`${encodeURIComponent(key)}=${encodeURIComponent(item)}`);
    }
  }
  return parts.length > 0 ? `?${parts.join('&')}` : '';
}

async function readText(response: Response): Promise<string> {
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

function parseJSON(
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
  return { hosts: body.hosts.filter(isHostInfo).map(normaliseHost) };
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
  return normaliseHost(body);
}

/**
 * `POST /gpudev/api/hosts`: add a remote Docker host. Unless `check` is
 * false the server connects to it first, which can take seconds.
 *
 * @returns the new host (status 201).
 * @throws {GPUDevAPIError} 400 for bad input, 409 when the name is taken,
 *   503 when the host did not answer, its SSH host key is unknown or the
 *   key was refused (the message says which and what to do).
 */
export async function addHost(
  request: IAddHostRequest,
  settings?: ServerConnection.ISettings
): Promise<IHostInfo> {
  const body = await requestAPI<unknown>(
    ['hosts'],
    {
      method: 'POST',
      body: JSON.stringify(request),
      headers: { 'Content-Type': 'application/json' }
    },
    settings
  );
  if (!isHostInfo(body)) {
    throw new GPUDevAPIError({
      status: 201,
      code: INVALID_RESPONSE,
      message: `The server sent the added host "${request.name}" in an unexpected shape.`
    });
  }
  return normaliseHost(body);
}

/**
 * `DELETE /gpudev/api/hosts/NAME`: stop using a host added with `addHost`.
 *
 * @throws {GPUDevAPIError} 400 for a host of the configuration, 409 while
 *   dev containers remain on it.
 */
export async function removeHost(
  name: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<void> {
  const { response } = await send(
    ['hosts', name],
    { method: 'DELETE' },
    settings
  );
  await throwUnlessOK(response);
}

/**
 * `GET /gpudev/api/environments`: the environments dev containers can be
 * started from, and the definitions that could not be used.
 */
export async function fetchEnvironments(
  settings?: ServerConnection.ISettings
): Promise<IEnvironmentsResponse> {
  const body = await requestAPI<unknown>(
    ['environments'],
    { method: 'GET' },
    settings
  );
  if (!isRecord(body) || !Array.isArray(body.environments)) {
    throw new GPUDevAPIError({
      status: 200,
      code: INVALID_RESPONSE,
      message: 'The server sent the environments in an unexpected shape.'
    });
  }
  const problems = Array.isArray(body.problems) ? body.problems : [];
  return {
    environments: body.environments.filter(isEnvironment),
    problems: problems.filter(isEnvironmentProblem)
  };
}

/**
 * `GET /gpudev/api/containers?all=1`: the dev containers of every reachable
 * host, stopped ones included.
 */
export async function fetchContainers(
  settings?: ServerConnection.ISettings
): Promise<IContainersResponse> {
  const body = await requestAPI<unknown>(
    ['containers'],
    { method: 'GET' },
    settings,
    { all: '1' }
  );
  if (!isRecord(body) || !Array.isArray(body.containers)) {
    throw new GPUDevAPIError({
      status: 200,
      code: INVALID_RESPONSE,
      message: 'The server sent the dev containers in an unexpected shape.'
    });
  }
  return {
    containers: body.containers.filter(isDevContainer).map(normaliseContainer)
  };
}

/** Options of `startContainer`. */
export interface IStartOptions {
  /** Called with each `progress` event, in order. */
  onProgress?: (progress: IStartProgress) => void;
  /** Stops reading the progress (the start itself goes on on the server). */
  signal?: AbortSignal;
  settings?: ServerConnection.ISettings;
}

/**
 * `POST /gpudev/api/containers`: start a dev container, following its
 * progress through the server-sent events of the answer.
 *
 * @returns the running container (the `result` event).
 * @throws {GPUDevAPIError} for an `error` event, an error status, or a
 *   stream that broke or ended without a result.
 */
export async function startContainer(
  request: IStartRequest,
  options: IStartOptions = {}
): Promise<IDevContainer> {
  const settings = options.settings ?? ServerConnection.makeSettings();
  const { url, response } = await send(
    ['containers'],
    {
      method: 'POST',
      body: JSON.stringify(request),
      headers: {
        Accept: 'text/event-stream',
        'Content-Type': 'application/json'
      },
      signal: options.signal
    },
    settings
  );
  await throwUnlessOK(response);
  const type = response.headers.get('Content-Type') ?? '';
  if (type.includes('text/event-stream') && response.body !== null) {
    return readEventStream(response.body, {
      what: `starting "${request.environment}"`,
      broken:
        'The container may still be starting: refresh the list of dev containers.',
      unfinished: `The server ended the progress of "${request.environment}" without saying whether the container started. Refresh the list of dev containers to see.`,
      failed:
        'Starting the dev container failed (the server log has the details).',
      result: value =>
        isDevContainer(value) ? normaliseContainer(value) : null,
      invalid:
        'The server sent the started dev container in an unexpected shape.',
      onProgress: options.onProgress
    });
  }
  // Without streaming the server answers 201 with the container.
  const body = parseJSON(await readText(response));
  if (body.parsed && isDevContainer(body.value)) {
    return normaliseContainer(body.value);
  }
  throw new GPUDevAPIError({
    status: response.status,
    code: INVALID_RESPONSE,
    message: `The server answered ${url} with neither progress events nor a dev container.`
  });
}

/** `POST /gpudev/api/containers/NAME/stop`: stop it; its GPU lease is freed. */
export async function stopContainer(
  name: string,
  settings?: ServerConnection.ISettings
): Promise<IDevContainer> {
  return containerAction(name, 'stop', settings);
}

/** `POST /gpudev/api/containers/NAME/start`: start a stopped one again. */
export async function resumeContainer(
  name: string,
  settings?: ServerConnection.ISettings
): Promise<IDevContainer> {
  return containerAction(name, 'start', settings);
}

/**
 * `PUT /gpudev/api/containers/NAME/pin` (pin) or `DELETE` (unpin): whether a
 * shared container keeps running, with its GPUs, after its last kernel ends.
 *
 * @returns the container, with its new `pinned`.
 * @throws {GPUDevAPIError} 400 for a container made for one kernel (its
 *   `kernel_id` is set): it ends with its kernel and cannot be pinned.
 */
export async function pinContainer(
  name: string,
  pinned: boolean,
  settings?: ServerConnection.ISettings
): Promise<IDevContainer> {
  const body = await requestAPI<unknown>(
    ['containers', name, 'pin'],
    { method: pinned ? 'PUT' : 'DELETE' },
    settings
  );
  return checkedContainer(name, body);
}

/**
 * `POST /gpudev/api/containers/NAME/terminal`: a Jupyter terminal whose shell
 * runs inside the running container; open it with the `terminal:open`
 * command and the returned `name`.
 *
 * @throws {GPUDevAPIError} 409 `conflict` when the container is not running.
 */
export async function openContainerTerminal(
  name: string,
  settings?: ServerConnection.ISettings
): Promise<IContainerTerminal> {
  const body = await requestAPI<unknown>(
    ['containers', name, 'terminal'],
    { method: 'POST' },
    settings
  );
  if (!isRecord(body) || typeof body.name !== 'string' || !body.name) {
    throw new GPUDevAPIError({
      status: 201,
      code: INVALID_RESPONSE,
      message: `The server sent the terminal of dev container "${name}" in an unexpected shape.`
    });
  }
  return {
    name: body.name,
    last_activity:
      typeof body.last_activity === 'string' ? body.last_activity : null
  };
}

/**
 * `DELETE /gpudev/api/containers/NAME`: remove it.
 *
 * @param force - remove it even with uncommitted changes; without it such a
 *   container is refused with a 409 `conflict` whose `details.changes` lists
 *   the changed paths.
 */
export async function removeContainer(
  name: string,
  force = false,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<void> {
  const { response } = await send(
    ['containers', name],
    { method: 'DELETE' },
    settings,
    force ? { force: '1' } : {}
  );
  await throwUnlessOK(response);
}

/**
 * `GET /gpudev/api/reclaims`: the GPU kernels that will be shut down for
 * idleness soon unless they are used or kept.
 */
export async function fetchReclaims(
  settings?: ServerConnection.ISettings
): Promise<IReclaimsResponse> {
  const body = await requestAPI<unknown>(
    ['reclaims'],
    { method: 'GET' },
    settings
  );
  if (!isRecord(body) || !Array.isArray(body.reclaims)) {
    throw new GPUDevAPIError({
      status: 200,
      code: INVALID_RESPONSE,
      message:
        'The server sent the pending GPU reclaims in an unexpected shape.'
    });
  }
  return {
    reclaims: body.reclaims.filter(isReclaim).map(normaliseReclaim),
    idle_timeout: finiteOrNull(body.idle_timeout) ?? 0,
    warning_seconds: finiteOrNull(body.warning_seconds) ?? 0
  };
}

/**
 * `POST /gpudev/api/kernels/ID/keep`: keep an idle GPU kernel; its idle
 * time starts again and it leaves the pending reclaims.
 *
 * @throws {GPUDevAPIError} 404 `not_found` when no such kernel holds GPUs.
 */
export async function keepKernel(
  kernelId: string,
  settings?: ServerConnection.ISettings
): Promise<void> {
  return kernelAction(kernelId, 'keep', settings);
}

/**
 * `POST /gpudev/api/kernels/ID/release`: shut an idle GPU kernel down now;
 * its container is stopped (and kept) and its GPUs freed.
 *
 * @throws {GPUDevAPIError} 404 `not_found` when no such kernel holds GPUs.
 */
export async function releaseKernel(
  kernelId: string,
  settings?: ServerConnection.ISettings
): Promise<void> {
  return kernelAction(kernelId, 'release', settings);
}

/** An action on a kernel, answered with an empty 204 when it went well. */
async function kernelAction(
  kernelId: string,
  action: 'keep' | 'release',
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<void> {
  const { response } = await send(
    ['kernels', kernelId, action],
    { method: 'POST' },
    settings
  );
  await throwUnlessOK(response);
}

async function containerAction(
  name: string,
  action: 'stop' | 'start',
  settings?: ServerConnection.ISettings
): Promise<IDevContainer> {
  const body = await requestAPI<unknown>(
    ['containers', name, action],
    { method: 'POST' },
    settings
  );
  return checkedContainer(name, body);
}

/** The container of an action's answer, or an error for another shape. */
function checkedContainer(name: string, body: unknown): IDevContainer {
  if (!isDevContainer(body)) {
    throw new GPUDevAPIError({
      status: 200,
      code: INVALID_RESPONSE,
      message: `The server sent dev container "${name}" in an unexpected shape.`
    });
  }
  return normaliseContainer(body);
}

/**
 * `POST /gpudev/api/containers/NAME/ports`: serve one more port of the
 * container through the server's proxy (see `webPortURL`).
 *
 * @returns the container, with its new `web_ports`.
 */
export async function addWebPort(
  name: string,
  port: number,
  settings?: ServerConnection.ISettings
): Promise<IDevContainer> {
  const body = await requestAPI<unknown>(
    ['containers', name, 'ports'],
    {
      method: 'POST',
      body: JSON.stringify({ port }),
      headers: { 'Content-Type': 'application/json' }
    },
    settings
  );
  return checkedContainer(name, body);
}

/**
 * `DELETE /gpudev/api/containers/NAME/ports/PORT`: stop serving a port added
 * at run time (the environment's forwardPorts stay served).
 *
 * @returns the container, with its `web_ports` as the server now has them.
 */
export async function removeWebPort(
  name: string,
  port: number,
  settings?: ServerConnection.ISettings
): Promise<IDevContainer> {
  const body = await requestAPI<unknown>(
    ['containers', name, 'ports', String(port)],
    { method: 'DELETE' },
    settings
  );
  return checkedContainer(name, body);
}

/**
 * Where the server's authenticated proxy serves a web port of a dev
 * container: `<base_url>gpudev/proxy/<name>/<port>/`.
 *
 * @param baseUrl - the server's base URL; defaults to the page's.
 */
export function webPortURL(
  name: string,
  port: number,
  baseUrl: string = PageConfig.getBaseUrl()
): string {
  const base = baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`;
  return `${base}gpudev/proxy/${encodeURIComponent(name)}/${port}/`;
}

/**
 * `GET /gpudev/api/containers/NAME/diff`: the container's changes as a
 * Dockerfile diff, each change listed in `items`.
 *
 * @param exclude - ids of changes to leave out of the diff.
 */
export async function fetchDiff(
  name: string,
  exclude: readonly string[] = [],
  settings: ServerConnection.ISettings = ServerConnection.makeSettings(),
  signal?: AbortSignal
): Promise<IContainerDiff> {
  const { url, response } = await send(
    ['containers', name, 'diff'],
    { method: 'GET', signal },
    settings,
    { exclude }
  );
  const body = parseJSON(await readText(response));
  if (!response.ok) {
    throw errorFromBody(response, body.parsed ? body.value : undefined);
  }
  const diff = body.parsed ? containerDiff(body.value) : null;
  if (!diff) {
    throw new GPUDevAPIError({
      status: response.status,
      code: INVALID_RESPONSE,
      message: `The server answered ${url} with something that is not a Dockerfile diff.`
    });
  }
  return diff;
}

/** Options of `commitContainer`. */
export interface ICommitOptions {
  /** Called with each `progress` event, in order. */
  onProgress?: (progress: ICommitProgress) => void;
  settings?: ServerConnection.ISettings;
}

/**
 * `POST /gpudev/api/containers/NAME/commit`: commit the container's changes
 * (write, verify, snapshot, push as `request` says), following its progress
 * through the server-sent events of the answer.
 *
 * @throws {GPUDevAPIError} for an `error` event (e.g. 409 `diff_changed`
 *   when the changes moved since the diff `request.expect` names, 409
 *   `verify_failed`), an error status, or a stream that broke.
 */
export async function commitContainer(
  name: string,
  request: ICommitRequest,
  options: ICommitOptions = {}
): Promise<ICommitResult> {
  const settings = options.settings ?? ServerConnection.makeSettings();
  const { url, response } = await send(
    ['containers', name, 'commit'],
    {
      method: 'POST',
      body: JSON.stringify(request),
      headers: {
        Accept: 'text/event-stream',
        'Content-Type': 'application/json'
      }
    },
    settings
  );
  await throwUnlessOK(response);
  const type = response.headers.get('Content-Type') ?? '';
  if (type.includes('text/event-stream') && response.body !== null) {
    return readEventStream(response.body, {
      what: `committing "${name}"`,
      broken:
        'The commit may still be running on the server: look at the Dockerfile and the registry before committing again.',
      unfinished: `The server ended the progress of the commit of "${name}" without saying whether it was done.`,
      failed: 'The commit failed (the server log has the details).',
      result: commitResult,
      invalid:
        'The server sent the result of the commit in an unexpected shape.',
      onProgress: options.onProgress
    });
  }
  const body = parseJSON(await readText(response));
  const result = body.parsed ? commitResult(body.value) : null;
  if (result) {
    return result;
  }
  throw new GPUDevAPIError({
    status: response.status,
    code: INVALID_RESPONSE,
    message: `The server answered ${url} with neither progress events nor a commit result.`
  });
}

/**
 * `GET /gpudev/api/containers/NAME/logs`: the container's output so far, or
 * its last `tail` lines.
 */
export async function fetchLogs(
  name: string,
  settings?: ServerConnection.ISettings,
  tail?: number
): Promise<string> {
  const body = await requestAPI<unknown>(
    ['containers', name, 'logs'],
    {},
    settings,
    tail ? { tail: String(tail) } : {}
  );
  if (!isRecord(body) || typeof body.logs !== 'string') {
    throw new GPUDevAPIError({
      status: 200,
      code: INVALID_RESPONSE,
      message: `The server sent the logs of "${name}" in an unexpected shape.`
    });
  }
  return body.logs;
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

/** How `readEventStream` reads one kind of streamed work. */
interface IStreamOptions<T> {
  /** The work, for messages: `starting "gpu"`. */
  what: string;
  /** Said after a broken connection: what the user can do. */
  broken: string;
  /** Said when the stream ends without a result or an error. */
  unfinished: string;
  /** Said for an `error` event without a message. */
  failed: string;
  /** The value of a `result` event, or `null` when it has the wrong shape. */
  result: (value: unknown) => T | null;
  /** Said for a `result` of the wrong shape. */
  invalid: string;
  onProgress?: (progress: ICommitProgress) => void;
}

/**
 * Read the server-sent events of streamed work (a start, a commit) up to its
 * `result` or `error`, reporting each `progress` event on the way.
 */
async function readEventStream<T>(
  stream: ReadableStream<Uint8Array>,
  options: IStreamOptions<T>
): Promise<T> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  const parser = new SSEParser();
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (reason) {
        throw new GPUDevAPIError({
          status: 0,
          code: NETWORK_ERROR,
          message: `The connection to the Jupyter server broke while ${options.what} (${describe(reason)}). ${options.broken}`
        });
      }
      const events = chunk.done
        ? [...parser.push(decoder.decode()), ...parser.end()]
        : parser.push(decoder.decode(chunk.value, { stream: true }));
      for (const event of events) {
        const outcome = eventOutcome(event, options);
        if (outcome !== undefined) {
          return outcome;
        }
      }
      if (chunk.done) {
        throw new GPUDevAPIError({
          status: 200,
          code: INVALID_RESPONSE,
          message: options.unfinished
        });
      }
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

/**
 * Apply one event of a stream: report `progress`, return the value of
 * `result`, throw the error of `error`; `undefined` for anything else.
 */
function eventOutcome<T>(
  event: IServerSentEvent,
  options: IStreamOptions<T>
): T | undefined {
  const data = parseJSON(event.data);
  const value = data.parsed ? data.value : undefined;
  switch (event.event) {
    case 'progress':
      if (
        isRecord(value) &&
        typeof value.stage === 'string' &&
        typeof value.message === 'string'
      ) {
        options.onProgress?.({
          stage: value.stage,
          message: value.message,
          current: finiteOrNull(value.current),
          total: finiteOrNull(value.total)
        });
      }
      return undefined;
    case 'result': {
      const result = options.result(value);
      if (result !== null) {
        return result;
      }
      throw new GPUDevAPIError({
        status: 200,
        code: INVALID_RESPONSE,
        message: options.invalid
      });
    }
    case 'error': {
      const body = isRecord(value) ? value : {};
      throw new GPUDevAPIError({
        status:
          typeof body.status === 'number' && body.status > 0
            ? body.status
            : 500,
        code: typeof body.error === 'string' ? body.error : 'internal',
        message:
          typeof body.message === 'string' && body.message
            ? body.message
            : options.failed,
        details: isRecord(body.details) ? body.details : null
      });
    }
    default:
      return undefined;
  }
}

/** One server-sent event: its type (`message` when unnamed) and data. */
export interface IServerSentEvent {
  event: string;
  data: string;
}

/**
 * Splits a `text/event-stream` body into events. Feed it text as it arrives;
 * an event is complete at the blank line that ends it. Comments and fields
 * other than `event` and `data` are skipped.
 */
export class SSEParser {
  /** Add text; returns the events it completed. */
  push(text: string): IServerSentEvent[] {
    let chunk = this._carriage + text;
    this._carriage = '';
    if (chunk.endsWith('\r')) {
      // Maybe the first half of a CRLF: wait for the next chunk.
      this._carriage = '\r';
      chunk = chunk.slice(0, -1);
    }
    this._buffer += chunk.replace(/\r\n?/g, '\n');
    const events: IServerSentEvent[] = [];
    let end = this._buffer.indexOf('\n\n');
    while (end !== -1) {
      const event = parseEventBlock(this._buffer.slice(0, end));
      this._buffer = this._buffer.slice(end + 2);
      if (event) {
        events.push(event);
      }
      end = this._buffer.indexOf('\n\n');
    }
    return events;
  }

  /** The stream ended: returns the last event if it lacked its blank line. */
  end(): IServerSentEvent[] {
    const rest = (this._buffer + this._carriage).replace(/\r\n?/g, '\n');
    this._buffer = '';
    this._carriage = '';
    const event = parseEventBlock(rest.replace(/\n+$/, ''));
    return event ? [event] : [];
  }

  private _buffer = '';
  private _carriage = '';
}

function parseEventBlock(block: string): IServerSentEvent | null {
  let event = 'message';
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) {
      continue;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'event') {
      event = value || 'message';
    } else if (field === 'data') {
      data.push(value);
    }
  }
  return data.length > 0 ? { event, data: data.join('\n') } : null;
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

const ORIGINS: readonly string[] = ['local', 'config', 'added'];

/**
 * The same host with every field the panel reads present: a server from
 * before `origin` and `workspace` leaves them out (its hosts are local or
 * configured, never added).
 */
function normaliseHost(host: IHostInfo): IHostInfo {
  const origin: unknown = host.origin;
  const workspace: unknown = host.workspace;
  const leases: unknown = host.leases;
  return {
    ...host,
    url: typeof host.url === 'string' ? host.url : '',
    origin:
      typeof origin === 'string' && ORIGINS.includes(origin)
        ? (origin as HostOrigin)
        : host.is_local
          ? 'local'
          : 'config',
    workspace:
      typeof workspace === 'string' && workspace !== '' ? workspace : null,
    leases: Array.isArray(leases)
      ? leases.filter(isLease).map(lease => ({
          lease_id: typeof lease.lease_id === 'string' ? lease.lease_id : '',
          container: lease.container,
          owner: typeof lease.owner === 'string' ? lease.owner : '',
          gpu_uuids: stringArray(lease.gpu_uuids),
          since: typeof lease.since === 'string' ? lease.since : ''
        }))
      : []
  };
}

/** True when `value` has the fields the panel relies on to draw an environment. */
export function isEnvironment(value: unknown): value is IEnvironment {
  return (
    isRecord(value) &&
    typeof value.name === 'string' &&
    typeof value.display_name === 'string' &&
    isRecord(value.gpu) &&
    typeof value.gpu.mode === 'string' &&
    typeof value.gpu.count === 'number'
  );
}

function isEnvironmentProblem(value: unknown): value is IEnvironmentProblem {
  return (
    isRecord(value) &&
    typeof value.file === 'string' &&
    typeof value.message === 'string'
  );
}

/**
 * True when `value` has the fields the panel relies on to draw a container.
 * The others, `pinned` and `kernel_id` included (a server from before them
 * leaves them out), are made usable by `normaliseContainer` rather than
 * hiding a container that may hold GPUs.
 */
export function isDevContainer(value: unknown): value is IDevContainer {
  return (
    isRecord(value) &&
    typeof value.name === 'string' &&
    typeof value.state === 'string'
  );
}

/** True when `value` has the fields the panel relies on to show a reclaim. */
export function isReclaim(value: unknown): value is IReclaim {
  return (
    isRecord(value) &&
    typeof value.kernel_id === 'string' &&
    value.kernel_id !== '' &&
    typeof value.container === 'string' &&
    typeof value.reclaim_at === 'number' &&
    Number.isFinite(value.reclaim_at)
  );
}

/** The same reclaim with every field the panel reads present. */
function normaliseReclaim(reclaim: IReclaim): IReclaim {
  return {
    kernel_id: reclaim.kernel_id,
    container: reclaim.container,
    environment:
      typeof reclaim.environment === 'string' ? reclaim.environment : '',
    gpu_uuids: stringArray(reclaim.gpu_uuids),
    idle_seconds: Math.max(0, finiteOrNull(reclaim.idle_seconds) ?? 0),
    reclaim_at: reclaim.reclaim_at
  };
}

/**
 * The same container with every field the panel reads present and of its
 * type: `pinned` false and `kernel_id` null when the server left them out.
 */
function normaliseContainer(container: IDevContainer): IDevContainer {
  const ports: Record<string, number> = {};
  const raw: unknown = container.ports;
  if (isRecord(raw)) {
    for (const [key, port] of Object.entries(raw)) {
      if (typeof port === 'number') {
        ports[key] = port;
      }
    }
  }
  const text = (value: unknown): string =>
    typeof value === 'string' ? value : '';
  // Missing from the answers of a server from before them.
  const pinned: unknown = container.pinned;
  const kernelId: unknown = container.kernel_id;
  const webPorts: unknown = container.web_ports;
  const forwardPorts: unknown = container.forward_ports;
  return {
    ...container,
    host: text(container.host),
    environment: text(container.environment),
    owner: text(container.owner),
    image: text(container.image),
    status: text(container.status),
    created: text(container.created),
    gpu_uuids: stringArray(container.gpu_uuids),
    lease_id:
      typeof container.lease_id === 'string' ? container.lease_id : null,
    ports,
    web_ports: Array.isArray(webPorts)
      ? [...new Set(webPorts.filter(isPortNumber))].sort((a, b) => a - b)
      : [],
    forward_ports: Array.isArray(forwardPorts)
      ? forwardPorts.filter(isPortNumber)
      : [],
    warnings: stringArray(container.warnings),
    pinned: pinned === true,
    kernel_id:
      typeof kernelId === 'string' && kernelId !== '' ? kernelId : null,
    started_at: textOrNull(container.started_at),
    finished_at: textOrNull(container.finished_at),
    kernels: finiteOrNull(container.kernels),
    last_activity: textOrNull(container.last_activity),
    uncommitted: finiteOrNull(container.uncommitted)
  };
}

/** A diff with every field the dialog reads, or `null` for another shape. */
function containerDiff(value: unknown): IContainerDiff | null {
  if (
    !isRecord(value) ||
    typeof value.diff !== 'string' ||
    typeof value.digest !== 'string'
  ) {
    return null;
  }
  return {
    dockerfile: typeof value.dockerfile === 'string' ? value.dockerfile : '',
    created: value.created === true,
    diff: value.diff,
    files: stringArray(value.files),
    reported: stringArray(value.reported),
    digest: value.digest,
    empty: value.empty === true || value.diff === '',
    items: Array.isArray(value.items) ? value.items.filter(isChangeItem) : [],
    excluded: stringArray(value.excluded)
  };
}

function isChangeItem(value: unknown): value is IChangeItem {
  return (
    isRecord(value) &&
    typeof value.id === 'string' &&
    value.id !== '' &&
    typeof value.kind === 'string' &&
    typeof value.label === 'string' &&
    typeof value.detail === 'string'
  );
}

/** A commit's result with every field the dialog reads, or `null`. */
function commitResult(value: unknown): ICommitResult | null {
  const diff = containerDiff(value);
  if (!diff || !isRecord(value)) {
    return null;
  }
  const verify = value.verify;
  const snapshot = value.snapshot;
  return {
    ...diff,
    written: typeof value.written === 'string' ? value.written : null,
    verify: isRecord(verify)
      ? {
          image_id: typeof verify.image_id === 'string' ? verify.image_id : '',
          seconds: finiteOrNull(verify.seconds) ?? 0,
          differences: stringArray(verify.differences),
          ok: verify.ok === true
        }
      : null,
    snapshot:
      isRecord(snapshot) && typeof snapshot.reference === 'string'
        ? {
            reference: snapshot.reference,
            image_id:
              typeof snapshot.image_id === 'string' ? snapshot.image_id : '',
            pushed: snapshot.pushed === true,
            digest:
              typeof snapshot.digest === 'string' && snapshot.digest
                ? snapshot.digest
                : null,
            removed_driver_files: stringArray(snapshot.removed_driver_files)
          }
        : null
  };
}

function isLease(value: unknown): value is IGPULease {
  return (
    isRecord(value) &&
    typeof value.container === 'string' &&
    Array.isArray(value.gpu_uuids)
  );
}

/** The strings of `value` when it is an array (anything else left out); else `[]`. */
export function stringArray(value: unknown): string[] {
  return Array.isArray(value)
    ? value.filter((item): item is string => typeof item === 'string')
    : [];
}

function textOrNull(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

function finiteOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** Throw the error an answer with an error status tells; nothing for a success. */
async function throwUnlessOK(response: Response): Promise<void> {
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

function describe(reason: unknown): string {
  if (reason instanceof Error) {
    return reason.message || reason.name;
  }
  return typeof reason === 'string' ? reason : 'unknown error';
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
