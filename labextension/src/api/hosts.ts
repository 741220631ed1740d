/** The Docker hosts: `/gpudev/api/hosts`. */
import type { ServerConnection } from '@jupyterlab/services';

import type { IAddHostRequest, IHostInfo, IHostsResponse } from '../types';
import { isHostInfo, normaliseHost, parseHost } from './hostShape';
import { isRecord } from './json';
import { requestNoContent, requestShaped } from './request';

/** A host list as the panel reads it, or `null` for another shape. */
export function parseHosts(value: unknown): IHostsResponse | null {
  if (!isRecord(value) || !Array.isArray(value.hosts)) {
    return null;
  }
  return { hosts: value.hosts.filter(isHostInfo).map(normaliseHost) };
}

/** `GET /gpudev/api/hosts`: every configured host with its engine and GPUs. */
export async function fetchHosts(
  settings?: ServerConnection.ISettings
): Promise<IHostsResponse> {
  return requestShaped(['hosts'], parseHosts, 'a host list', {
    init: { method: 'GET' },
    settings
  });
}

/** `GET /gpudev/api/hosts/<name>`: one host. */
export async function fetchHost(
  name: string,
  settings?: ServerConnection.ISettings
): Promise<IHostInfo> {
  return requestShaped(['hosts', name], parseHost, `host "${name}"`, {
    init: { method: 'GET' },
    settings
  });
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
  return requestShaped(
    ['hosts'],
    parseHost,
    `the added host "${request.name}"`,
    {
      init: {
        method: 'POST',
        body: JSON.stringify(request),
        headers: { 'Content-Type': 'application/json' }
      },
      settings
    }
  );
}

/**
 * `DELETE /gpudev/api/hosts/NAME`: stop using a host added with `addHost`.
 *
 * @throws {GPUDevAPIError} 400 for a host of the configuration, 409 while
 *   dev containers remain on it.
 */
export async function removeHost(
  name: string,
  settings?: ServerConnection.ISettings
): Promise<void> {
  return requestNoContent(['hosts', name], {
    init: { method: 'DELETE' },
    settings
  });
}
