/**
 * The API client against a fake `fetch` behind the real
 * `ServerConnection.makeRequest`: canned answers, good and malformed.
 */
import { ServerConnection } from '@jupyterlab/services';

import {
  checkShape,
  fetchContainers,
  fetchDiff,
  fetchHosts,
  fetchKernelInfo,
  GPUDevAPIError,
  INVALID_RESPONSE,
  NETWORK_ERROR,
  parseReclaims,
  removeContainer,
  SSEParser,
  startContainer,
  stopContainer
} from '../src/api';
import { changedPaths, isUncommittedChanges } from '../src/models';
import type { IStartProgress } from '../src/types';

const BASE = 'http://localhost:8888/';

/** The requests the fake server got. */
let requests: Request[] = [];

/** Settings whose fetch answers each request with `answer(request)`. */
function serverAnswering(
  answer: (request: Request) => Response | Promise<Response>
): ServerConnection.ISettings {
  requests = [];
  return ServerConnection.makeSettings({
    baseUrl: BASE,
    fetch: (async (request: Request) => {
      requests.push(request);
      return answer(request);
    }) as typeof fetch
  });
}

/** The URL of a request without the cache buster `makeRequest` adds. */
function url(request: Request | undefined): string {
  return (request?.url ?? '').replace(/[?&]\d+$/, '');
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' }
  });
}

/** The error a promise rejects with (fails when it resolves). */
async function rejection(promise: Promise<unknown>): Promise<GPUDevAPIError> {
  try {
    await promise;
  } catch (reason) {
    expect(reason).toBeInstanceOf(GPUDevAPIError);
    return reason as GPUDevAPIError;
  }
  throw new Error('the call did not fail');
}

const HOST = {
  name: 'local',
  url: 'unix:///var/run/docker.sock',
  transport: 'local',
  is_local: true,
  reachable: true,
  reason: null,
  engine: null,
  gpus: {
    source: 'none',
    gpus: [],
    driver_version: null,
    cuda_version: null,
    reason: 'no GPU',
    warnings: []
  }
};

describe('fetchHosts', () => {
  it('GETs /gpudev/api/hosts and fills in the fields an old server leaves out', async () => {
    const settings = serverAnswering(() => json({ hosts: [HOST] }));
    const { hosts } = await fetchHosts(settings);
    expect(requests).toHaveLength(1);
    expect(url(requests[0])).toBe(`${BASE}gpudev/api/hosts`);
    expect(requests[0]?.method).toBe('GET');
    expect(hosts).toHaveLength(1);
    expect(hosts[0]).toMatchObject({
      name: 'local',
      origin: 'local',
      workspace: null,
      leases: [],
      cluster: null
    });
  });

  it('reads a Kubernetes host and leaves out what it cannot draw', async () => {
    const cluster = {
      version: 'v1.34.2',
      namespace: 'team-ml',
      context: 'lab',
      nodes: [
        {
          name: 'gpu-1',
          ready: true,
          schedulable: true,
          product: 'NVIDIA-A100-SXM4-80GB',
          memory_mib: 81920,
          gpus: [
            {
              resource: 'nvidia.com/gpu',
              capacity: 8,
              allocatable: 8,
              allocated: 6
            },
            { resource: 42 }
          ]
        },
        { ready: true },
        'gpu-2'
      ],
      allocations: [
        {
          node: 'gpu-1',
          resource: 'nvidia.com/gpu',
          count: 2,
          namespace: 'team-ml',
          container: 'alice-gpu',
          owner: 'alice'
        },
        { node: 'gpu-1', resource: 'nvidia.com/gpu', count: -3 },
        null
      ],
      warnings: ['only the first 20000 pods were read', 7]
    };
    const settings = serverAnswering(() =>
      json({
        hosts: [
          { ...HOST, name: 'cluster', transport: 'k8s', cluster },
          { ...HOST, name: 'odd', transport: 'k8s', cluster: { nodes: [] } }
        ]
      })
    );
    const { hosts } = await fetchHosts(settings);
    const read = hosts[0]?.cluster;
    expect(read?.version).toBe('v1.34.2');
    expect(read?.nodes.map(n => n.name)).toEqual(['gpu-1']);
    expect(read?.nodes[0]?.gpus).toEqual([
      { resource: 'nvidia.com/gpu', capacity: 8, allocatable: 8, allocated: 6 }
    ]);
    expect(read?.allocations.map(a => [a.container, a.count])).toEqual([
      ['alice-gpu', 2],
      ['', 0]
    ]);
    expect(read?.warnings).toEqual(['only the first 20000 pods were read']);
    // A Docker host, or a cluster without a version, has no cluster facts
    expect(hosts[1]?.cluster).toBeNull();
  });

  it('leaves out the hosts without the fields the panel draws', async () => {
    const settings = serverAnswering(() =>
      json({ hosts: [HOST, { name: 'broken' }] })
    );
    const { hosts } = await fetchHosts(settings);
    expect(hosts.map(h => h.name)).toEqual(['local']);
  });

  it('rejects a list of another shape with a clear error', async () => {
    const settings = serverAnswering(() => json({ hosts: 'none' }));
    const error = await rejection(fetchHosts(settings));
    expect(error.code).toBe(INVALID_RESPONSE);
    expect(error.status).toBe(200);
    expect(error.message).toBe(
      'The server sent a host list in an unexpected shape.'
    );
  });

  it('rejects an answer that is not JSON', async () => {
    const settings = serverAnswering(
      () => new Response('<html>login</html>', { status: 200 })
    );
    const error = await rejection(fetchHosts(settings));
    expect(error.code).toBe(INVALID_RESPONSE);
    expect(error.message).toContain('not JSON');
  });

  it('turns an error answer into its code, message and details', async () => {
    const settings = serverAnswering(() =>
      json(
        {
          error: 'engine_unreachable',
          message: 'No Docker host is reachable.',
          details: { hosts: [{ ...HOST, reachable: false, reason: 'down' }] }
        },
        503
      )
    );
    const error = await rejection(fetchHosts(settings));
    expect(error.status).toBe(503);
    expect(error.code).toBe('engine_unreachable');
    expect(error.message).toBe('No Docker host is reachable.');
    expect(error.hosts.map(h => [h.name, h.reason])).toEqual([
      ['local', 'down']
    ]);
  });

  it('says the extension may be missing on a bare 404', async () => {
    const settings = serverAnswering(
      () => new Response('', { status: 404, statusText: 'Not Found' })
    );
    const error = await rejection(fetchHosts(settings));
    expect(error.code).toBe('http_404');
    expect(error.message).toContain('server extension enabled');
  });

  it('reports a server out of reach as a network error', async () => {
    const settings = serverAnswering(() => {
      throw new TypeError('Failed to fetch');
    });
    const error = await rejection(fetchHosts(settings));
    expect(error.status).toBe(0);
    expect(error.code).toBe(NETWORK_ERROR);
    expect(error.message).toContain('Failed to fetch');
  });
});

describe('containers', () => {
  it('asks for stopped ones too and normalises each container', async () => {
    const settings = serverAnswering(() =>
      json({
        containers: [
          {
            name: 'c1',
            state: 'running',
            web_ports: [8080, 80, 8080, 0, 'x'],
            ports: { '8888': 49153, bad: 'x' }
          },
          { name: 'p1', state: 'running', pod: true },
          { name: 42 }
        ]
      })
    );
    const { containers } = await fetchContainers(settings);
    expect(url(requests[0])).toBe(`${BASE}gpudev/api/containers?all=1`);
    expect(containers).toHaveLength(2);
    expect(containers[1]).toMatchObject({ name: 'p1', pod: true });
    expect(containers[0]).toMatchObject({
      name: 'c1',
      pod: false,
      pinned: false,
      kernel_id: null,
      web_ports: [80, 8080],
      ports: { '8888': 49153 },
      gpu_uuids: [],
      uncommitted: null
    });
  });

  it('names the container in the error of an action answered in another shape', async () => {
    const settings = serverAnswering(() => json(['not', 'a', 'container']));
    const error = await rejection(stopContainer('gpu box', settings));
    expect(url(requests[0])).toBe(
      `${BASE}gpudev/api/containers/gpu%20box/stop`
    );
    expect(requests[0]?.method).toBe('POST');
    expect(error.message).toBe(
      'The server sent dev container "gpu box" in an unexpected shape.'
    );
  });

  it('removes with force as a query parameter, and reads a refusal', async () => {
    let status = 409;
    const settings = serverAnswering(() =>
      status === 204
        ? new Response(null, { status: 204 })
        : json(
            {
              error: 'conflict',
              message: 'c1 has uncommitted changes.',
              details: { changes: ['/etc/motd', 7] }
            },
            409
          )
    );
    const error = await rejection(removeContainer('c1', false, settings));
    expect(url(requests[0])).toBe(`${BASE}gpudev/api/containers/c1`);
    expect(requests[0]?.method).toBe('DELETE');
    expect(isUncommittedChanges(error)).toBe(true);
    expect(changedPaths(error)).toEqual(['/etc/motd']);

    status = 204;
    await expect(removeContainer('c1', true, settings)).resolves.toBe(
      undefined
    );
    expect(url(requests[1])).toBe(`${BASE}gpudev/api/containers/c1?force=1`);
  });

  it('repeats the exclude key of a diff for each change left out', async () => {
    const settings = serverAnswering(() =>
      json({ diff: '', digest: 'd1', items: [{ id: 'apt:curl' }] })
    );
    const diff = await fetchDiff('c1', ['apt:curl', 'env:A B'], settings);
    expect(url(requests[0])).toBe(
      `${BASE}gpudev/api/containers/c1/diff?exclude=apt%3Acurl&exclude=env%3AA%20B`
    );
    // An item without its label is not one the dialog can show.
    expect(diff).toMatchObject({ digest: 'd1', empty: true, items: [] });
  });
});

describe('startContainer (server-sent events)', () => {
  function stream(text: string): Response {
    return new Response(text, {
      status: 200,
      headers: { 'Content-Type': 'text/event-stream' }
    });
  }

  it('reports each progress event and resolves with the result', async () => {
    const settings = serverAnswering(() =>
      stream(
        'event: progress\ndata: {"stage":"pull","message":"pulling","current":5,"total":10}\n\n' +
          ': a comment\n\n' +
          'event: progress\r\ndata: {"stage":"start","message":"starting"}\r\n\r\n' +
          'event: result\ndata: {"name":"c1","state":"running"}\n\n'
      )
    );
    const progress: IStartProgress[] = [];
    const container = await startContainer(
      { environment: 'gpu' },
      { settings, onProgress: p => progress.push(p) }
    );
    expect(requests[0]?.headers.get('Accept')).toBe('text/event-stream');
    expect(await requests[0]?.json()).toEqual({ environment: 'gpu' });
    expect(progress).toEqual([
      { stage: 'pull', message: 'pulling', current: 5, total: 10 },
      { stage: 'start', message: 'starting', current: null, total: null }
    ]);
    expect(container).toMatchObject({ name: 'c1', pinned: false });
  });

  it('rejects with the error event of the stream', async () => {
    const settings = serverAnswering(() =>
      stream(
        'event: error\ndata: {"status":409,"error":"no_host","message":"No host can take it.","details":{"hosts":{"a":"busy"}}}\n\n'
      )
    );
    const error = await rejection(
      startContainer({ environment: 'gpu' }, { settings })
    );
    expect(error.status).toBe(409);
    expect(error.code).toBe('no_host');
    expect(error.hostReasons).toEqual([['a', 'busy']]);
  });

  it('rejects a result of another shape, and a stream that ends without one', async () => {
    let body = 'event: result\ndata: {"name":"c1"}\n\n';
    const settings = serverAnswering(() => stream(body));
    const invalid = await rejection(
      startContainer({ environment: 'gpu' }, { settings })
    );
    expect(invalid.code).toBe(INVALID_RESPONSE);
    expect(invalid.message).toBe(
      'The server sent the started dev container in an unexpected shape.'
    );

    body = 'event: progress\ndata: {"stage":"pull","message":"x"}\n\n';
    const unfinished = await rejection(
      startContainer({ environment: 'gpu' }, { settings })
    );
    expect(unfinished.message).toContain('without saying whether');
  });
});

describe('fetchKernelInfo', () => {
  it('reads a gpudev kernel', async () => {
    const settings = serverAnswering(() =>
      json({
        kernel_id: 'k1',
        container: 'c1',
        gpu_uuids: ['GPU-1', 3],
        shared: true
      })
    );
    await expect(fetchKernelInfo('k1', settings)).resolves.toEqual({
      kernel_id: 'k1',
      container: 'c1',
      host: '',
      environment: '',
      gpu_uuids: ['GPU-1'],
      shared: true,
      state: '',
      pod: false
    });
  });

  it('reads a kernel in a pod', async () => {
    const settings = serverAnswering(() =>
      json({ kernel_id: 'k2', container: 'p1', gpu_uuids: [], pod: true })
    );
    const info = await fetchKernelInfo('k2', settings);
    expect(info.pod).toBe(true);
  });

  it('rejects a kernel without its container', async () => {
    const settings = serverAnswering(() =>
      json({ kernel_id: 'k1', container: '', gpu_uuids: [] })
    );
    const error = await rejection(fetchKernelInfo('k1', settings));
    expect(error.message).toBe(
      'The server sent kernel "k1" in an unexpected shape.'
    );
  });
});

describe('checkShape', () => {
  const parse = (value: unknown): number | null =>
    typeof value === 'number' ? value : null;

  it('returns what the parser makes of a good value', () => {
    expect(checkShape(3, parse, 'a number')).toBe(3);
  });

  it('throws an invalid_response error naming what was expected', () => {
    expect(() => checkShape('3', parse, 'a number', { status: 201 })).toThrow(
      'The server sent a number in an unexpected shape.'
    );
    try {
      checkShape('3', parse, 'a number', { status: 201 });
    } catch (reason) {
      expect((reason as GPUDevAPIError).status).toBe(201);
      expect((reason as GPUDevAPIError).code).toBe(INVALID_RESPONSE);
    }
  });
});

describe('SSEParser', () => {
  it('joins events split anywhere, CRLF included, and multi-line data', () => {
    const parser = new SSEParser();
    expect(parser.push('event: a\r')).toEqual([]);
    expect(parser.push('\ndata: 1\r\ndata: 2\r')).toEqual([]);
    expect(parser.push('\n\r\nevent: b\ndata: 3')).toEqual([
      { event: 'a', data: '1\n2' }
    ]);
    expect(parser.end()).toEqual([{ event: 'b', data: '3' }]);
  });
});

describe('parseReclaims', () => {
  it('counts the GPUs a reclaim frees, by UUID or as the server says (a pod)', () => {
    const base = { kernel_id: 'k1', container: 'c1', reclaim_at: 1700000000 };
    const parsed = parseReclaims({
      reclaims: [
        { ...base, gpu_uuids: ['GPU-1', 'GPU-2'] },
        { ...base, kernel_id: 'k2', gpu_uuids: [], gpus: 4 },
        { ...base, kernel_id: 'k3', gpu_uuids: [], gpus: 'many' }
      ]
    });
    expect(parsed?.reclaims.map(r => r.gpus)).toEqual([2, 4, 0]);
  });
});
