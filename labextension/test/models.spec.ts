/**
 * The models' state transitions, with their API calls replaced: refresh,
 * errors, backoff, actions under way, dispose, the signals emitted.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import { Signal } from '@lumino/signaling';

import { GPUDevAPIError } from '../src/api';
import { allowedActions } from '../src/components/containers/ContainerActions';
import {
  CommitModel,
  ContainersModel,
  GPUIndexes,
  HostsModel,
  KernelBadgeModel,
  KernelUsages,
  ReclaimsModel,
  UsageModel
} from '../src/models';
import type {
  IContainerDiff,
  IDevContainer,
  IHostInfo,
  IHostsResponse,
  IKernelInfo,
  IKernelUsage,
  IReclaim
} from '../src/types';
import {
  devContainer,
  gpu,
  gpuUsage,
  host,
  hostUsage,
  kernelUsage
} from './fixtures';

/** A dev container as the models' tests read it: no GPU, nothing known yet. */
function container(
  name: string,
  extra: Partial<IDevContainer> = {}
): IDevContainer {
  return devContainer(name, {
    container_id: name,
    gpu_uuids: [],
    lease_id: null,
    kernels: null,
    uncommitted: null,
    started_at: null,
    ...extra
  });
}

const unreachable = (): GPUDevAPIError =>
  new GPUDevAPIError({
    status: 503,
    code: 'engine_unreachable',
    message: 'No Docker host is reachable.',
    details: { hosts: [{ ...host('a'), reachable: false, reason: 'down' }] }
  });

/** A promise and the functions settling it. */
function deferred<T>(): {
  promise: Promise<T>;
  resolve: (value: T) => void;
  reject: (reason: unknown) => void;
} {
  let resolve!: (value: T) => void;
  let reject!: (reason: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

describe('HostsModel (the polled base)', () => {
  it('goes from loading to ready, emitting each new state', async () => {
    const fetchHosts = jest.fn(() =>
      Promise.resolve<IHostsResponse>({ hosts: [host('a')] })
    );
    const model = new HostsModel({ auto: false, api: { fetchHosts } });
    const seen: string[] = [];
    model.stateChanged.connect((_, state) => seen.push(state.status));
    expect(model.state.status).toBe('loading');

    await model.refresh();
    expect(fetchHosts).toHaveBeenCalledTimes(1);
    expect(model.state.status).toBe('ready');
    expect(model.state.hosts.map(h => h.name)).toEqual(['a']);
    expect(model.state.lastUpdated).toBeInstanceOf(Date);
    expect(seen).toEqual(['ready']);
    model.dispose();
  });

  it('keeps the hosts the error lists, then recovers', async () => {
    let fail = true;
    const model = new HostsModel({
      auto: false,
      api: {
        fetchHosts: () =>
          fail
            ? Promise.reject(unreachable())
            : Promise.resolve({ hosts: [host('b')] })
      }
    });
    await model.refresh();
    expect(model.state.status).toBe('error');
    expect(model.state.error?.code).toBe('engine_unreachable');
    expect(model.state.hosts.map(h => [h.name, h.reason])).toEqual([
      ['a', 'down']
    ]);

    fail = false;
    await model.refresh();
    expect(model.state.status).toBe('ready');
    expect(model.state.error).toBeNull();
    expect(model.state.hosts.map(h => h.name)).toEqual(['b']);
    model.dispose();
  });

  it('wraps anything thrown into a GPUDevAPIError', async () => {
    const model = new HostsModel({
      auto: false,
      api: { fetchHosts: () => Promise.reject(new Error('boom')) }
    });
    await model.refresh();
    expect(model.state.error).toBeInstanceOf(GPUDevAPIError);
    expect(model.state.error?.code).toBe('unexpected');
    expect(model.state.error?.message).toBe('boom');
    model.dispose();
  });

  it('lists an action under way, refuses a second one, and refreshes after', async () => {
    const fetchHosts = jest.fn(() => Promise.resolve({ hosts: [host('a')] }));
    const adding = deferred<IHostInfo>();
    const model = new HostsModel({
      auto: false,
      api: { fetchHosts, addHost: () => adding.promise }
    });
    await model.refresh();
    fetchHosts.mockClear();

    const added = model.add({ name: 'b', url: 'ssh://b' });
    expect(model.state.pending.get('b')).toBe('add');
    const busy = await model
      .add({ name: 'b', url: 'ssh://b' })
      .catch((e: unknown) => e);
    expect(busy).toBeInstanceOf(GPUDevAPIError);
    expect((busy as GPUDevAPIError).code).toBe('busy');

    adding.resolve(host('b'));
    await expect(added).resolves.toMatchObject({ name: 'b' });
    expect(model.state.pending.has('b')).toBe(false);
    expect(model.state.hosts.map(h => h.name)).toEqual(['a', 'b']);
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(fetchHosts).toHaveBeenCalled();
    model.dispose();
  });

  it('asks again when an action ended while the list was on its way', async () => {
    const before = deferred<IHostsResponse>();
    const after = deferred<IHostsResponse>();
    let call = 0;
    const model = new HostsModel({
      auto: false,
      api: {
        fetchHosts: () => (call++ === 0 ? before : after).promise,
        removeHost: () => Promise.resolve()
      }
    });
    const first = model.refresh();
    while (call === 0) {
      await new Promise(resolve => setTimeout(resolve, 0));
    }
    await model.remove('old');
    before.resolve({ hosts: [host('old')] });
    after.resolve({ hosts: [] });
    await first;
    // The answer asked for before the removal was dropped.
    expect(model.state.hosts).toEqual([]);
    model.dispose();
  });

  it('stops changing and emitting once disposed', async () => {
    const fetchHosts = jest.fn(() => Promise.resolve({ hosts: [] }));
    const model = new HostsModel({ auto: false, api: { fetchHosts } });
    const listener = jest.fn();
    model.stateChanged.connect(listener);
    model.dispose();
    expect(model.isDisposed).toBe(true);
    await model.refresh();
    expect(fetchHosts).not.toHaveBeenCalled();
    expect(listener).not.toHaveBeenCalled();
    expect(model.state.status).toBe('loading');
    model.dispose();
  });
});

describe('polling', () => {
  beforeEach(() => {
    jest.useFakeTimers();
  });
  afterEach(() => {
    jest.useRealTimers();
  });

  /** How often `fetch` is called over 60 s of a visible model. */
  async function callsIn60s(fetch: () => Promise<IHostsResponse>) {
    const spy = jest.fn(fetch);
    const model = new HostsModel({ interval: 1000, api: { fetchHosts: spy } });
    model.visible = true;
    await jest.advanceTimersByTimeAsync(60000);
    const calls = spy.mock.calls.length;
    const status = model.state.status;
    model.dispose();
    await jest.advanceTimersByTimeAsync(10000);
    expect(spy.mock.calls.length).toBe(calls);
    return { calls, status };
  }

  it('polls at the interval while the server answers', async () => {
    const { calls, status } = await callsIn60s(() =>
      Promise.resolve({ hosts: [] })
    );
    expect(status).toBe('ready');
    expect(calls).toBeGreaterThanOrEqual(50);
  });

  it('backs off while the requests fail', async () => {
    const { calls, status } = await callsIn60s(() =>
      Promise.reject(unreachable())
    );
    expect(status).toBe('error');
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(calls).toBeLessThan(20);
  });

  it('stands by while the panel is hidden, and refreshes when shown', async () => {
    const spy = jest.fn(() => Promise.resolve({ hosts: [] }));
    const model = new HostsModel({ interval: 1000, api: { fetchHosts: spy } });
    await jest.advanceTimersByTimeAsync(10000);
    expect(spy).not.toHaveBeenCalled();
    model.visible = true;
    await jest.advanceTimersByTimeAsync(10);
    expect(spy).toHaveBeenCalledTimes(1);
    model.dispose();
  });
});

describe('ContainersModel', () => {
  it('follows a start in state.starting and keeps its warnings', async () => {
    const started = deferred<IDevContainer>();
    let report: ((p: { stage: string; message: string }) => void) | undefined;
    const model = new ContainersModel({
      auto: false,
      api: {
        fetchEnvironments: () =>
          Promise.resolve({ environments: [], problems: [] }),
        fetchContainers: () =>
          Promise.resolve({ containers: [container('c1')] }),
        startContainer: (_request, options) => {
          report = options.onProgress;
          return started.promise;
        }
      }
    });
    const start = model.start({ environment: 'gpu' });
    expect(model.state.starting.get('gpu')?.progress).toBeNull();
    report?.({ stage: 'pull', message: 'pulling' });
    expect(model.state.starting.get('gpu')?.progress?.stage).toBe('pull');
    await expect(model.start({ environment: 'gpu' })).rejects.toMatchObject({
      code: 'busy'
    });

    started.resolve(container('c1', { warnings: ['no GPU free'] }));
    await start;
    expect(model.state.starting.size).toBe(0);
    await model.refresh();
    // The list does not repeat the start's warnings: they are kept.
    expect(model.state.containers[0]?.warnings).toEqual(['no GPU free']);
    model.dispose();
  });

  it('shows the warnings the list gives while it gives them', async () => {
    // A GPU-idle dev container's listing says when it will be stopped, then
    // why it was (c.GPUIdleContainers), then nothing once it runs again.
    const listed = [
      [
        'Its GPUs have done no work for 50 min: it will be stopped at 10:00 UTC'
      ],
      ['Stopped at 10:00 UTC and kept, its GPUs freed'],
      []
    ];
    let call = 0;
    const model = new ContainersModel({
      auto: false,
      api: {
        fetchEnvironments: () =>
          Promise.resolve({ environments: [], problems: [] }),
        fetchContainers: () =>
          Promise.resolve({
            containers: [container('c1', { warnings: listed[call++] ?? [] })]
          })
      }
    });
    for (const expected of listed) {
      await model.refresh();
      expect(model.state.containers[0]?.warnings).toEqual(expected);
    }
    model.dispose();
  });

  it('keeps the count of changes an action answer did not make', async () => {
    const model = new ContainersModel({
      auto: false,
      api: {
        fetchEnvironments: () =>
          Promise.resolve({ environments: [], problems: [] }),
        fetchContainers: () =>
          Promise.resolve({
            containers: [container('c1', { uncommitted: 3 })]
          }),
        stopContainer: name =>
          Promise.resolve(container(name, { state: 'exited' }))
      }
    });
    await model.refresh();
    const stopped = await model.stop('c1');
    expect(stopped.uncommitted).toBeNull();
    expect(model.state.containers[0]).toMatchObject({
      state: 'exited',
      uncommitted: 3
    });
    model.dispose();
  });
});

describe('ReclaimsModel', () => {
  const reclaim: IReclaim = {
    kernel_id: 'k1',
    container: 'c1',
    environment: 'gpu',
    gpu_uuids: ['GPU-1'],
    gpus: 1,
    idle_seconds: 600,
    reclaim_at: 1700000000
  };

  it('drops a kept kernel at once and rejects a failed keep', async () => {
    let keep = (): Promise<void> => Promise.resolve();
    const model = new ReclaimsModel({
      auto: false,
      api: {
        fetchReclaims: () =>
          Promise.resolve({
            reclaims: [reclaim],
            idle_timeout: 3600,
            warning_seconds: 300
          }),
        keepKernel: () => keep(),
        fetchKernelUsage: () => Promise.reject(new Error('no usage route'))
      }
    });
    await model.refresh();
    expect(model.state).toMatchObject({
      idleTimeout: 3600,
      reclaims: [reclaim]
    });

    const kept = model.keep('k1');
    expect(model.state.pending.get('k1')).toBe('keep');
    await kept;
    expect(model.state.pending.size).toBe(0);
    expect(model.state.reclaims).toEqual([]);

    keep = () => Promise.reject(new Error('nope'));
    await expect(model.keep('k1')).rejects.toBeInstanceOf(GPUDevAPIError);
    model.dispose();
  });

  it('asks what each pending kernel holds; a failure leaves it unknown', async () => {
    // Given two pending reclaims, the server telling the use of the first only
    const other = { ...reclaim, kernel_id: 'k2', container: 'c2' };
    const fetchKernelUsage = jest.fn((kernelId: string) =>
      kernelId === 'k1'
        ? Promise.resolve(kernelUsage('k1'))
        : Promise.reject(
            new GPUDevAPIError({ status: 404, code: 'not_found', message: '' })
          )
    );
    const model = new ReclaimsModel({
      auto: false,
      api: {
        fetchReclaims: () =>
          Promise.resolve({
            reclaims: [reclaim, other],
            idle_timeout: 3600,
            warning_seconds: 300
          }),
        fetchKernelUsage
      }
    });
    // When the list is read
    await model.refresh();
    // Then each kernel was asked about once, and only the first is known
    expect(fetchKernelUsage.mock.calls.map(call => call[0]).sort()).toEqual([
      'k1',
      'k2'
    ]);
    expect(model.state.status).toBe('ready');
    expect(model.state.holdings.get('k1')?.gpus[0]?.memory_used_mib).toBe(4300);
    expect(model.state.holdings.has('k2')).toBe(false);
    model.dispose();
  });
});

describe('UsageModel', () => {
  it("keeps each host's use by name, and the last one on a failure", async () => {
    let fail = false;
    const fetchUsage = jest.fn(() =>
      fail
        ? Promise.reject(new Error('down'))
        : Promise.resolve({
            hosts: [hostUsage('a', [gpuUsage('GPU-1', 0)]), hostUsage('b')]
          })
    );
    const model = new UsageModel({ auto: false, fetchUsage });
    await model.refresh();
    expect(model.state.status).toBe('ready');
    expect([...model.state.hosts.keys()]).toEqual(['a', 'b']);
    expect(model.state.hosts.get('a')?.gpus[0]?.uuid).toBe('GPU-1');

    fail = true;
    await model.refresh();
    expect(model.state.status).toBe('error');
    expect(model.state.hosts.size).toBe(2);
    model.dispose();
  });

  it('makes one request per poll, only while the panel is shown', async () => {
    jest.useFakeTimers();
    try {
      const fetchUsage = jest.fn(() => Promise.resolve({ hosts: [] }));
      const model = new UsageModel({ interval: 1000, fetchUsage });
      await jest.advanceTimersByTimeAsync(5000);
      expect(fetchUsage).not.toHaveBeenCalled();
      model.visible = true;
      await jest.advanceTimersByTimeAsync(3500);
      expect(fetchUsage.mock.calls.length).toBeGreaterThanOrEqual(3);
      expect(fetchUsage.mock.calls.length).toBeLessThanOrEqual(5);
      model.visible = false;
      const calls = fetchUsage.mock.calls.length;
      await jest.advanceTimersByTimeAsync(5000);
      expect(fetchUsage.mock.calls.length).toBe(calls);
      model.dispose();
    } finally {
      jest.useRealTimers();
    }
  });
});

describe('KernelUsages', () => {
  beforeEach(() => {
    jest.useFakeTimers();
  });
  afterEach(() => {
    jest.useRealTimers();
  });

  it('polls a kernel once however many items watch it, while one is visible', async () => {
    const fetchKernelUsage = jest.fn((id: string) =>
      Promise.resolve(kernelUsage(id))
    );
    const usages = new KernelUsages({ interval: 1000, fetchKernelUsage });
    // Given two notebooks of kernel k1, both hidden
    const first = usages.watch('k1');
    const second = usages.watch('k1');
    expect(first.model).toBe(second.model);
    expect(usages.size).toBe(1);
    await jest.advanceTimersByTimeAsync(5000);
    expect(fetchKernelUsage).not.toHaveBeenCalled();

    // When both are shown, then one request per interval
    first.visible = true;
    second.visible = true;
    await jest.advanceTimersByTimeAsync(3500);
    const calls = fetchKernelUsage.mock.calls.length;
    expect(calls).toBeGreaterThanOrEqual(3);
    expect(calls).toBeLessThanOrEqual(5);
    expect(first.model.state.usage?.id).toBe('k1');

    // When the visible one goes, the hidden one stands by
    second.dispose();
    first.visible = false;
    await jest.advanceTimersByTimeAsync(5000);
    expect(fetchKernelUsage.mock.calls.length).toBe(calls);

    // And the last watch's end ends the poll
    first.dispose();
    expect(usages.size).toBe(0);
    expect((first.model as unknown as { isDisposed: boolean }).isDisposed).toBe(
      true
    );
    usages.dispose();
  });

  it('forgets the use of a kernel the server no longer knows', async () => {
    let gone = false;
    const usages = new KernelUsages({
      interval: 1000,
      fetchKernelUsage: (id: string): Promise<IKernelUsage> =>
        gone
          ? Promise.reject(
              new GPUDevAPIError({
                status: 404,
                code: 'not_found',
                message: ''
              })
            )
          : Promise.resolve(kernelUsage(id))
    });
    const watch = usages.watch('k1');
    watch.visible = true;
    await jest.advanceTimersByTimeAsync(10);
    expect(watch.model.state.usage).not.toBeNull();
    gone = true;
    await jest.advanceTimersByTimeAsync(1500);
    expect(watch.model.state.usage).toBeNull();
    usages.dispose();
  });
});

describe('CommitModel', () => {
  const diff = (
    digest: string,
    ids: string[] = ['apt:curl']
  ): IContainerDiff => ({
    dockerfile: 'Dockerfile',
    created: false,
    diff: '+RUN apt-get install curl',
    files: [],
    reported: [],
    digest,
    empty: false,
    items: ids.map(id => ({ id, kind: 'apt', label: id, detail: '' })),
    excluded: []
  });
  const choices = {
    write: true,
    verify: false,
    snapshot: '',
    push: false,
    message: ''
  };

  beforeEach(() => {
    jest.useFakeTimers();
  });
  afterEach(() => {
    jest.useRealTimers();
  });

  it('reads the diff, then again once after a burst of selection changes', async () => {
    const fetchDiff = jest.fn((_name: string, exclude: string[]) =>
      Promise.resolve(diff(`d${exclude.length}`, ['apt:curl', 'env:A']))
    );
    const model = new CommitModel({
      name: 'c1',
      debounce: 100,
      api: { fetchDiff }
    });
    await model.refresh();
    expect(model.state).toMatchObject({ status: 'ready', current: true });
    expect(model.canCommit(choices)).toBe(true);

    model.setIncluded('apt:curl', false);
    model.setIncluded('env:A', false);
    expect(model.state).toMatchObject({ refreshing: true, current: false });
    expect(model.canCommit(choices)).toBe(false);
    await jest.advanceTimersByTimeAsync(100);
    expect(fetchDiff).toHaveBeenCalledTimes(2);
    expect(fetchDiff.mock.calls[1]?.[1]).toEqual(['apt:curl', 'env:A']);
    expect(model.state).toMatchObject({ current: true, refreshing: false });
    expect(model.state.diff?.digest).toBe('d2');
    model.dispose();
  });

  it('names the digest it shows, and reads the diff again when it moved', async () => {
    let digest = 'd1';
    const fetchDiff = jest.fn(() => Promise.resolve(diff(digest)));
    const commitContainer = jest.fn(() =>
      Promise.reject(
        new GPUDevAPIError({
          status: 409,
          code: 'diff_changed',
          message: 'The changes moved.'
        })
      )
    );
    const model = new CommitModel({
      name: 'c1',
      api: { fetchDiff, commitContainer }
    });
    await model.refresh();
    const errors: (string | undefined)[] = [];
    model.stateChanged.connect((_, state) => errors.push(state.error?.code));
    digest = 'd2';
    await expect(model.commit(choices)).rejects.toMatchObject({
      code: 'diff_changed'
    });
    expect(commitContainer.mock.calls[0]).toEqual(
      expect.arrayContaining([
        'c1',
        expect.objectContaining({ expect: 'd1', write: true, exclude: [] })
      ])
    );
    expect(errors).toContain('diff_changed');
    await jest.advanceTimersByTimeAsync(0);
    expect(fetchDiff).toHaveBeenCalledTimes(2);
    expect(model.state.diff?.digest).toBe('d2');
    model.dispose();
  });

  it('refuses a commit that cannot run, and does nothing once disposed', async () => {
    const fetchDiff = jest.fn(() => Promise.resolve(diff('d1')));
    const model = new CommitModel({ name: 'c1', api: { fetchDiff } });
    await expect(model.commit(choices)).rejects.toMatchObject({ code: 'busy' });
    model.dispose();
    await model.refresh();
    expect(fetchDiff).not.toHaveBeenCalled();
  });
});

describe('KernelBadgeModel', () => {
  /** A session context with a kernel `id` (none for `null`). */
  function session(id: string | null) {
    const context = {
      kernelChanged: new Signal<unknown, unknown>({}),
      statusChanged: new Signal<unknown, string>({}),
      session: id ? { kernel: { id } } : null,
      shutdown: jest.fn(() => Promise.resolve())
    };
    return {
      context,
      sessionContext: context as unknown as ISessionContext
    };
  }
  const info: IKernelInfo = {
    kernel_id: 'k1',
    container: 'c1',
    host: 'a',
    environment: 'gpu',
    gpu_uuids: ['GPU-1'],
    shared: false,
    state: 'running',
    pod: false
  };

  it('shows a gpudev kernel, with the GPU indexes of the panel hosts', async () => {
    const hosts = new HostsModel({
      auto: false,
      api: { fetchHosts: () => Promise.resolve({ hosts: [host('a')] }) }
    });
    const fetchHost = jest.fn(() => Promise.reject(new Error('offline')));
    const indexes = new GPUIndexes({
      settings: {} as never,
      hosts,
      fetchHost
    });
    const { sessionContext } = session('k1');
    const model = new KernelBadgeModel({
      sessionContext,
      indexes,
      settings: {} as never,
      fetchKernelInfo: () => Promise.resolve(info)
    });
    await model.refresh();
    expect(model.state.info).toEqual(info);
    expect(model.state.indexes.size).toBe(0);

    // The panel's hosts model learns the GPU: the item follows, no request.
    const changes = jest.fn();
    model.stateChanged.connect(changes);
    await hosts.refresh();
    hosts['setState']({
      ...hosts.state,
      hosts: [host('a', [gpu('GPU-1', 3)])]
    });
    expect(model.state.indexes.get('GPU-1')).toBe(3);
    expect(changes).toHaveBeenCalled();
    model.dispose();
    hosts.dispose();
  });

  it('hides the item for a kernel that is not a gpudev one', async () => {
    const { sessionContext, context } = session('k2');
    const fetchKernelInfo = jest.fn(() =>
      Promise.reject(
        new GPUDevAPIError({ status: 404, code: 'not_found', message: 'no' })
      )
    );
    const model = new KernelBadgeModel({
      sessionContext,
      indexes: new GPUIndexes({ settings: {} as never }),
      settings: {} as never,
      fetchKernelInfo
    });
    await model.refresh();
    expect(model.state.info).toBeNull();

    // A new kernel is asked about; a disposed model no longer listens.
    fetchKernelInfo.mockClear();
    context.kernelChanged.emit(null);
    expect(fetchKernelInfo).toHaveBeenCalledTimes(1);
    model.dispose();
    context.kernelChanged.emit(null);
    expect(fetchKernelInfo).toHaveBeenCalledTimes(1);
  });

  it("polls its kernel's GPU use only while visible, and stops on dispose", async () => {
    jest.useFakeTimers();
    try {
      const fetchKernelUsage = jest.fn((id: string) =>
        Promise.resolve(kernelUsage(id))
      );
      const usages = new KernelUsages({ interval: 1000, fetchKernelUsage });
      const { sessionContext } = session('k1');
      const model = new KernelBadgeModel({
        sessionContext,
        indexes: new GPUIndexes({ settings: {} as never }),
        settings: {} as never,
        usages,
        fetchKernelInfo: () => Promise.resolve(info)
      });
      await model.refresh();
      // Given a gpudev kernel with a GPU, in a notebook not shown: no request
      await jest.advanceTimersByTimeAsync(3000);
      expect(fetchKernelUsage).not.toHaveBeenCalled();
      expect(model.state.usage).toBeNull();

      // When the notebook is shown, its use is asked for and shown
      model.visible = true;
      await jest.advanceTimersByTimeAsync(10);
      expect(fetchKernelUsage).toHaveBeenCalledWith('k1');
      expect(model.state.usage?.gpus[0]?.memory_used_mib).toBe(4300);

      // When it is disposed, the poll ends
      model.dispose();
      expect(usages.size).toBe(0);
      const calls = fetchKernelUsage.mock.calls.length;
      await jest.advanceTimersByTimeAsync(5000);
      expect(fetchKernelUsage.mock.calls.length).toBe(calls);
      usages.dispose();
    } finally {
      jest.useRealTimers();
    }
  });

  it('never polls the use of a CPU-only kernel, nor of one not gpudev', async () => {
    const fetchKernelUsage = jest.fn((id: string) =>
      Promise.resolve(kernelUsage(id))
    );
    const usages = new KernelUsages({ fetchKernelUsage });
    const { sessionContext } = session('k1');
    let answer: Promise<IKernelInfo> = Promise.resolve({
      ...info,
      gpu_uuids: []
    });
    const model = new KernelBadgeModel({
      sessionContext,
      indexes: new GPUIndexes({ settings: {} as never }),
      settings: {} as never,
      usages,
      fetchKernelInfo: () => answer
    });
    model.visible = true;
    await model.refresh();
    expect(usages.size).toBe(0);
    answer = Promise.reject(
      new GPUDevAPIError({ status: 404, code: 'not_found', message: 'no' })
    );
    await model.refresh();
    expect(usages.size).toBe(0);
    expect(fetchKernelUsage).not.toHaveBeenCalled();
    model.dispose();
    usages.dispose();
  });

  it('hides the item when the setting is off', async () => {
    const { sessionContext } = session('k1');
    const model = new KernelBadgeModel({
      sessionContext,
      indexes: new GPUIndexes({ settings: {} as never }),
      settings: {} as never,
      enabled: false,
      fetchKernelInfo: () => Promise.resolve(info)
    });
    await model.refresh();
    expect(model.state.info).toBeNull();
    model.enabled = true;
    await model.refresh();
    expect(model.state.info?.container).toBe('c1');
    model.dispose();
  });
});

describe('allowedActions', () => {
  it('offers stop, pin and commit for a running Docker container, remove once stopped', () => {
    expect(allowedActions(container('box'), true, true)).toEqual({
      commit: true,
      terminal: true,
      stop: true,
      pin: true,
      start: false,
      remove: false
    });
    const stopped = container('box', { state: 'exited' });
    expect(allowedActions(stopped, false, true)).toMatchObject({
      stop: false,
      start: true,
      remove: true
    });
  });

  it('removes, commits and pins a running pod kernels share, never stops it', () => {
    expect(allowedActions(container('pod', { pod: true }), true, true)).toEqual(
      {
        commit: true,
        terminal: true,
        stop: false,
        pin: true,
        start: false,
        remove: true
      }
    );
  });

  it('never pins a pod made for one kernel: it ends with that kernel', () => {
    const own = container('kpod', { pod: true, kernel_id: 'k1' });
    expect(allowedActions(own, true, true)).toMatchObject({ pin: false });
  });
});
