/**
 * The environments and the dev containers: `/gpudev/api/environments`,
 * `/gpudev/api/containers` and the actions on one container.
 */
import { PageConfig } from '@jupyterlab/coreutils';
import type { ServerConnection } from '@jupyterlab/services';

import { PROXY_PATH } from '../constants';
import type {
  IContainerTerminal,
  IContainersResponse,
  IDevContainer,
  IEnvironment,
  IEnvironmentProblem,
  IEnvironmentsResponse,
  IStartProgress,
  IStartRequest
} from '../types';
import {
  finiteOrNull,
  isPortNumber,
  isRecord,
  stringArray,
  text,
  textOrNull
} from './json';
import { requestNoContent, requestShaped } from './request';
import { requestStreamed } from './sse';

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

/** The environments as the panel reads them, or `null` for another shape. */
export function parseEnvironments(
  value: unknown
): IEnvironmentsResponse | null {
  if (!isRecord(value) || !Array.isArray(value.environments)) {
    return null;
  }
  const problems = Array.isArray(value.problems) ? value.problems : [];
  return {
    environments: value.environments.filter(isEnvironment),
    problems: problems.filter(isEnvironmentProblem)
  };
}

/**
 * True when `value` has the fields the panel relies on to draw a container.
 * The others, `pinned` and `kernel_id` included (a server from before them
 * leaves them out), are made usable by `parseContainer` rather than
 * hiding a container that may hold GPUs.
 */
export function isDevContainer(value: unknown): value is IDevContainer {
  return (
    isRecord(value) &&
    typeof value.name === 'string' &&
    typeof value.state === 'string'
  );
}

/**
 * The container with every field the panel reads present and of its type
 * (`pinned` false and `kernel_id` null when the server left them out), or
 * `null` for another shape.
 */
export function parseContainer(value: unknown): IDevContainer | null {
  if (!isDevContainer(value)) {
    return null;
  }
  const container = value;
  const ports: Record<string, number> = {};
  const raw: unknown = container.ports;
  if (isRecord(raw)) {
    for (const [key, port] of Object.entries(raw)) {
      if (typeof port === 'number') {
        ports[key] = port;
      }
    }
  }
  // Missing from the answers of a server from before them.
  const pinned: unknown = container.pinned;
  const kernelId: unknown = container.kernel_id;
  const webPorts: unknown = container.web_ports;
  const forwardPorts: unknown = container.forward_ports;
  const pod: unknown = container.pod;
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
    uncommitted: finiteOrNull(container.uncommitted),
    pod: pod === true
  };
}

/** The container list as the panel reads it, or `null` for another shape. */
export function parseContainers(value: unknown): IContainersResponse | null {
  if (!isRecord(value) || !Array.isArray(value.containers)) {
    return null;
  }
  return {
    containers: value.containers
      .map(parseContainer)
      .filter((c): c is IDevContainer => c !== null)
  };
}

/**
 * `GET /gpudev/api/environments`: the environments dev containers can be
 * started from, and the definitions that could not be used.
 */
export async function fetchEnvironments(
  settings?: ServerConnection.ISettings
): Promise<IEnvironmentsResponse> {
  return requestShaped(
    ['environments'],
    parseEnvironments,
    'the environments',
    { init: { method: 'GET' }, settings }
  );
}

/**
 * `GET /gpudev/api/containers?all=1`: the dev containers of every reachable
 * host, stopped ones included.
 */
export async function fetchContainers(
  settings?: ServerConnection.ISettings
): Promise<IContainersResponse> {
  return requestShaped(['containers'], parseContainers, 'the dev containers', {
    init: { method: 'GET' },
    settings,
    query: { all: '1' }
  });
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
  return requestStreamed(['containers'], request, {
    what: `starting "${request.environment}"`,
    broken:
      'The container may still be starting: refresh the list of dev containers.',
    unfinished: `The server ended the progress of "${request.environment}" without saying whether the container started. Refresh the list of dev containers to see.`,
    failed:
      'Starting the dev container failed (the server log has the details).',
    result: parseContainer,
    resultName: 'the started dev container',
    plainName: 'a dev container',
    ...options
  });
}

/** The container of an action's answer, checked. */
async function containerRequest(
  name: string,
  path: readonly string[],
  init: RequestInit,
  settings?: ServerConnection.ISettings
): Promise<IDevContainer> {
  return requestShaped(
    ['containers', name, ...path],
    parseContainer,
    `dev container "${name}"`,
    { init, settings }
  );
}

/** `POST /gpudev/api/containers/NAME/stop`: stop it; its GPU lease is freed. */
export async function stopContainer(
  name: string,
  settings?: ServerConnection.ISettings
): Promise<IDevContainer> {
  return containerRequest(name, ['stop'], { method: 'POST' }, settings);
}

/** `POST /gpudev/api/containers/NAME/start`: start a stopped one again. */
export async function resumeContainer(
  name: string,
  settings?: ServerConnection.ISettings
): Promise<IDevContainer> {
  return containerRequest(name, ['start'], { method: 'POST' }, settings);
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
  return containerRequest(
    name,
    ['pin'],
    { method: pinned ? 'PUT' : 'DELETE' },
    settings
  );
}

/** A terminal as the panel reads it, or `null` for another shape. */
export function parseTerminal(value: unknown): IContainerTerminal | null {
  if (!isRecord(value) || typeof value.name !== 'string' || !value.name) {
    return null;
  }
  return {
    name: value.name,
    last_activity:
      typeof value.last_activity === 'string' ? value.last_activity : null
  };
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
  return requestShaped(
    ['containers', name, 'terminal'],
    parseTerminal,
    `the terminal of dev container "${name}"`,
    { init: { method: 'POST' }, settings }
  );
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
  settings?: ServerConnection.ISettings
): Promise<void> {
  return requestNoContent(['containers', name], {
    init: { method: 'DELETE' },
    settings,
    query: force ? { force: '1' } : {}
  });
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
  return containerRequest(
    name,
    ['ports'],
    {
      method: 'POST',
      body: JSON.stringify({ port }),
      headers: { 'Content-Type': 'application/json' }
    },
    settings
  );
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
  return containerRequest(
    name,
    ['ports', String(port)],
    { method: 'DELETE' },
    settings
  );
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
  return `${base}${PROXY_PATH}/${encodeURIComponent(name)}/${port}/`;
}

/** The logs of a container, or `null` for another shape. */
function parseLogs(value: unknown): string | null {
  return isRecord(value) && typeof value.logs === 'string' ? value.logs : null;
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
  return requestShaped(
    ['containers', name, 'logs'],
    parseLogs,
    `the logs of "${name}"`,
    { settings, query: tail ? { tail: String(tail) } : {} }
  );
}
