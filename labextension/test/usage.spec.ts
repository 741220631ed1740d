/**
 * GPU use by process: the answers of `/gpudev/api/usage` read with every
 * field possibly missing (against a fake `fetch` behind the real
 * `ServerConnection.makeRequest`), a container's and an owner's use of a
 * GPU added up, and the words the toolbar item, the release dialog and the
 * idle warnings say it with.
 */
import { ServerConnection } from '@jupyterlab/services';

import {
  fetchKernelUsage,
  fetchUsage,
  GPUDevAPIError,
  INVALID_RESPONSE,
  parseKernelUsage,
  parseUsage
} from '../src/api';
import {
  holdsText,
  memoryText,
  shortGPUName
} from '../src/components/common/usageText';
import { reclaimMessage } from '../src/components/containers/Reclaims';
import {
  kernelUsageText,
  kernelUsageTooltip
} from '../src/components/notebook/kernelText';
import { containerGPUUse, holdersOf, sumUse } from '../src/models';
import type { IReclaim } from '../src/types';
import { trans } from './dom';
import {
  gpuUsage,
  hostUsage,
  kernelGPU,
  kernelUsage,
  processUse
} from './fixtures';

/** Settings whose fetch answers `body` and records the URLs asked. */
function serverAnswering(body: unknown, status = 200) {
  const urls: string[] = [];
  const settings = ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/',
    fetch: ((request: Request) => {
      urls.push(request.url.replace(/[?&]\d+$/, ''));
      return Promise.resolve(
        new Response(JSON.stringify(body), {
          status,
          headers: { 'Content-Type': 'application/json' }
        })
      );
    }) as typeof fetch
  });
  return { settings, urls };
}

describe('fetchUsage', () => {
  it('GETs /gpudev/api/usage and fills in what the server left out', async () => {
    // Given an answer with a process of an unknown kind and fields missing
    const { settings, urls } = serverAnswering({
      hosts: [
        {
          host: 'local',
          gpus: [
            {
              uuid: 'GPU-1',
              index: 0,
              name: 'NVIDIA H100 80GB HBM3',
              memory_total_mib: 81559,
              memory_used_mib: 'lots',
              processes: [
                { kind: 'gpudev', container: 'c1', memory_used_mib: 4300 },
                { kind: 'alien', memory_used_mib: -5, pid: 1.5 },
                'not a process'
              ]
            },
            { index: 1 }
          ]
        },
        { reason: 'no host name' }
      ]
    });
    // When it is read
    const answer = await fetchUsage(settings);
    // Then the URL is the usage route
    expect(urls).toEqual(['http://localhost:8888/gpudev/api/usage']);
    // And the unusable entries are left out, the missing fields filled in
    expect(answer.hosts).toHaveLength(1);
    const gpu = answer.hosts[0]?.gpus[0];
    expect(answer.hosts[0]?.gpus).toHaveLength(1);
    expect(answer.hosts[0]?.reason).toBeNull();
    expect(gpu).toMatchObject({
      uuid: 'GPU-1',
      memory_used_mib: null,
      utilization_percent: null,
      processes_listed: true
    });
    expect(gpu?.processes).toEqual([
      {
        kind: 'gpudev',
        memory_used_mib: 4300,
        sm_percent: null,
        memory_percent: null,
        container: 'c1',
        owner: null,
        pid: null,
        uid: null,
        kernel: null,
        orphan: false
      },
      expect.objectContaining({
        kind: 'other',
        memory_used_mib: null,
        pid: null
      })
    ]);
  });

  it('asks for one host by name', async () => {
    const { settings, urls } = serverAnswering({ hosts: [] });
    await fetchUsage(settings, 'gpu box');
    expect(urls).toEqual([
      'http://localhost:8888/gpudev/api/usage?host=gpu%20box'
    ]);
  });

  it('rejects an answer of another shape', async () => {
    expect(parseUsage({ hosts: 'all' })).toBeNull();
    expect(parseUsage(null)).toBeNull();
    const { settings } = serverAnswering({ usage: [] });
    await expect(fetchUsage(settings)).rejects.toMatchObject({
      code: INVALID_RESPONSE
    });
  });
});

describe('fetchKernelUsage', () => {
  it("GETs the kernel's use and reads its GPUs", async () => {
    const { settings, urls } = serverAnswering({
      kernel: {
        id: 'k1',
        host: 'local',
        container: 'c1',
        gpus: [{ uuid: 'GPU-1', name: 'H100', memory_used_mib: 4300 }, {}],
        reason: null
      }
    });
    const usage = await fetchKernelUsage('k1', settings);
    expect(urls).toEqual(['http://localhost:8888/gpudev/api/usage?kernel=k1']);
    expect(usage).toEqual({
      id: 'k1',
      host: 'local',
      container: 'c1',
      reason: null,
      gpus: [
        {
          uuid: 'GPU-1',
          index: null,
          name: 'H100',
          memory_used_mib: 4300,
          sm_percent: null,
          memory_percent: null,
          gpu_memory_used_mib: null,
          gpu_memory_total_mib: null,
          gpu_utilization_percent: null
        }
      ]
    });
  });

  it('rejects the hosts a server without `?kernel=` answers, and reads a 404', async () => {
    // A server from before the kernel route answers every host's use
    expect(parseKernelUsage({ hosts: [] })).toBeNull();
    expect(parseKernelUsage({ kernel: { host: 'x' } })).toBeNull();
    const { settings } = serverAnswering(
      { error: 'not_found', message: 'No such kernel.' },
      404
    );
    const error = await fetchKernelUsage('k9', settings).catch(
      (e: unknown) => e
    );
    expect(error).toBeInstanceOf(GPUDevAPIError);
    expect((error as GPUDevAPIError).status).toBe(404);
  });

  it('keeps the reason the use is unknown', () => {
    expect(
      parseKernelUsage({ kernel: { id: 'k1', reason: 'a Kubernetes host' } })
    ).toMatchObject({ gpus: [], reason: 'a Kubernetes host' });
  });
});

describe('containerGPUUse', () => {
  const usage = hostUsage('local', [
    gpuUsage('GPU-0', 0, [
      processUse('c1', { kernel: 'k1', memory_used_mib: 4000, sm_percent: 30 }),
      processUse('c1', { kernel: 'k2', memory_used_mib: 1000, sm_percent: 7 }),
      processUse('c1', { memory_used_mib: 512 }),
      processUse('c1', { orphan: true, kernel: 'k0', memory_used_mib: 2048 }),
      processUse('c2', { kernel: 'k3', memory_used_mib: 9999 })
    ]),
    gpuUsage('GPU-1', 1),
    gpuUsage('GPU-2', 2, [processUse('c1', { memory_used_mib: 10 })])
  ]);

  it("adds up a container's kernels, its other processes and what ended kernels left, per GPU", () => {
    // Given a container leasing GPU-1 and GPU-0, with processes on GPU-0 and GPU-2
    const uses = containerGPUUse(usage, 'c1', ['GPU-1', 'GPU-0']);
    // Then its leased GPUs come first, in their order, then the others
    expect(uses.map(u => u.gpu.uuid)).toEqual(['GPU-1', 'GPU-0', 'GPU-2']);
    // And on GPU-0 its kernels, its other processes and the left-behind ones are apart
    expect(uses[1]).toMatchObject({
      kernels: { memoryMiB: 5000, smPercent: 37, processes: 2 },
      others: { memoryMiB: 512, smPercent: null, processes: 1 },
      orphans: { memoryMiB: 2048, processes: 1 }
    });
    // And a leased GPU it does not use reads as nothing
    expect(uses[0]?.kernels.processes).toBe(0);
  });

  it('says nothing without the host, and leaves out GPUs it neither leases nor uses', () => {
    expect(containerGPUUse(undefined, 'c1', ['GPU-0'])).toEqual([]);
    expect(containerGPUUse(usage, 'c3')).toEqual([]);
  });
});

describe('holdersOf', () => {
  it('groups a GPU by owner, names other users and processes of no container as the server allows', () => {
    const uses = holdersOf(
      gpuUsage('GPU-0', 0, [
        processUse('c1', { owner: 'ada', memory_used_mib: 1000 }),
        processUse('c2', { owner: 'ada', memory_used_mib: 500 }),
        processUse('c1', { owner: 'ada', orphan: true, memory_used_mib: 64 }),
        processUse(null, {
          kind: 'another user',
          owner: 'another user',
          pid: null,
          memory_used_mib: 8000
        }),
        processUse(null, {
          kind: 'other',
          owner: null,
          pid: null,
          memory_used_mib: 100
        }),
        processUse(null, {
          kind: 'other',
          owner: null,
          pid: null,
          memory_used_mib: 28
        }),
        processUse(null, {
          kind: 'other',
          owner: null,
          pid: 77,
          uid: 1001,
          memory_used_mib: 300
        })
      ])
    );
    // Then each holder once, most memory first
    expect(
      uses.map(u => [u.holder, u.orphan, u.use.memoryMiB, u.containers])
    ).toEqual([
      [{ kind: 'another user', owner: 'another user' }, false, 8000, []],
      [{ kind: 'owner', owner: 'ada' }, false, 1500, ['c1', 'c2']],
      [{ kind: 'process', pid: 77, uid: 1001 }, false, 300, []],
      [{ kind: 'not gpudev' }, false, 128, []],
      [{ kind: 'owner', owner: 'ada' }, true, 64, ['c1']]
    ]);
  });

  it('adds nothing up for a GPU without processes', () => {
    expect(holdersOf(gpuUsage('GPU-0', 0))).toEqual([]);
    expect(sumUse([])).toEqual({
      memoryMiB: null,
      smPercent: null,
      processes: 0
    });
  });
});

describe('GPU use in words', () => {
  it('says memory in MiB under a GiB, else in GiB', () => {
    expect(memoryText(512, trans)).toBe('512 MiB');
    expect(memoryText(4300, trans)).toBe('4.2 GiB');
    expect(memoryText(144000, trans)).toBe('141 GiB');
    expect(memoryText(null, trans)).toBe('?');
  });

  it("shortens a GPU's name as people say it", () => {
    expect(shortGPUName('NVIDIA H100 80GB HBM3')).toBe('H100');
    expect(shortGPUName('NVIDIA A100-SXM4-80GB')).toBe('A100');
    expect(shortGPUName('NVIDIA A100-PCIE-40GB')).toBe('A100');
    expect(shortGPUName('NVIDIA GeForce RTX 4090')).toBe('RTX 4090');
    expect(shortGPUName('Tesla T4')).toBe('T4');
    expect(shortGPUName('NVIDIA H200 NVL')).toBe('H200');
    expect(shortGPUName('NVIDIA RTX A6000')).toBe('RTX A6000');
    expect(shortGPUName('')).toBe('');
  });

  it('says what a kernel holds: memory, which GPU, SM time now', () => {
    expect(holdsText([kernelGPU('GPU-1', { sm_percent: 0 })], trans)).toBe(
      '4.2 GiB on H100 GPU 0, 0% now'
    );
    expect(
      holdsText(
        [
          kernelGPU('GPU-1', { sm_percent: null }),
          kernelGPU('GPU-2', { index: null, memory_used_mib: 100 })
        ],
        trans
      )
    ).toBe('4.2 GiB on H100 GPU 0; 100 MiB on H100, 37% now');
    expect(
      holdsText(
        [kernelGPU('GPU-1', { memory_used_mib: null, sm_percent: null })],
        trans
      )
    ).toBe('');
  });

  it("gives the toolbar item the kernel's memory, GPU name and utilization", () => {
    expect(kernelUsageText(kernelUsage('k1'), trans)).toBe(
      'H100 · 4.2 GiB · 37%'
    );
    // Two GPUs: memory added up, the busiest one's SM time
    expect(
      kernelUsageText(
        kernelUsage('k1', [
          kernelGPU('GPU-1'),
          kernelGPU('GPU-2', {
            index: 1,
            memory_used_mib: 1000,
            sm_percent: 90
          })
        ]),
        trans
      )
    ).toBe('2× H100 · 5.2 GiB · 90%');
    // Not sampled: no percent
    expect(
      kernelUsageText(
        kernelUsage('k1', [kernelGPU('GPU-1', { sm_percent: null })]),
        trans
      )
    ).toBe('H100 · 4.2 GiB');
    expect(kernelUsageText(kernelUsage('k1', []), trans)).toBe('no GPU memory');
    // Its processes there not listed: unknown, not 0
    expect(
      kernelUsageText(
        kernelUsage('k1', [
          kernelGPU('GPU-1', { memory_used_mib: null, sm_percent: null })
        ]),
        trans
      )
    ).toBe('H100 · use n/a');
    expect(
      kernelUsageTooltip(
        kernelUsage('k1', [
          kernelGPU('GPU-1', { memory_used_mib: null, sm_percent: null })
        ]),
        new Map(),
        trans
      )
    ).toContain(
      "this kernel: not known (this GPU's processes were not listed)"
    );
    expect(
      kernelUsageText(
        kernelUsage('k1', [
          kernelGPU('GPU-1', { memory_used_mib: 0, sm_percent: null })
        ]),
        trans
      )
    ).toBe('H100 · 0 MiB');
    expect(
      kernelUsageText(kernelUsage('k1', [], { reason: 'tcp:// host' }), trans)
    ).toBe('GPU use n/a');
  });

  it("tells in the tooltip the kernel's share and the whole GPU's use, or why it is unknown", () => {
    const tooltip = kernelUsageTooltip(kernelUsage('k1'), new Map(), trans);
    expect(tooltip.split('\n')).toEqual([
      'GPU use of this kernel:',
      'GPU 0 (NVIDIA H100 80GB HBM3):',
      '  this kernel: 4.2 GiB, 37% of SM time, 12% of memory time',
      '  whole GPU: 29.3 GiB of 79.6 GiB used, 45% utilization'
    ]);
    // The index from the panel's hosts when the answer has none
    expect(
      kernelUsageTooltip(
        kernelUsage('k1', [kernelGPU('GPU-1', { index: null })]),
        new Map([['GPU-1', 3]]),
        trans
      )
    ).toContain('GPU 3 (NVIDIA H100 80GB HBM3):');
    expect(
      kernelUsageTooltip(
        kernelUsage('k1', [], { reason: 'tcp:// host' }),
        new Map(),
        trans
      )
    ).toBe('GPU use unavailable: tcp:// host');
  });

  it('adds what the kernel holds to the idle warning, when known', () => {
    const reclaim: IReclaim = {
      kernel_id: 'k1',
      container: 'c1',
      environment: 'gpu',
      gpu_uuids: ['GPU-1'],
      gpus: 1,
      idle_seconds: 1500,
      reclaim_at: 1700000000
    };
    const holding = kernelUsage('k1', [kernelGPU('GPU-1', { sm_percent: 0 })]);
    expect(reclaimMessage(reclaim, trans, holding)).toMatch(
      /^GPU kernel in c1 \(1 GPU\) has been idle for 25 min and will be released at .+; it holds 4\.2 GiB on H100 GPU 0, 0% now$/
    );
    expect(reclaimMessage(reclaim, trans)).not.toContain('holds');
    expect(
      reclaimMessage(reclaim, trans, { ...holding, reason: 'unknown' })
    ).not.toContain('holds');
  });
});
