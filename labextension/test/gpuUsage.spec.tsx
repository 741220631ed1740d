/**
 * GPU use where people look: each GPU's use by owner on the host card
 * (GPUSection, GPUUsers), a dev container's use of its GPUs in its row
 * (ContainerFacts, ContainerGPUUse), what a kernel holds in the release
 * dialog and the idle warning, and the notebook toolbar item polling its
 * kernel's use only while it is on screen (KernelBadge).
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';
import { Signal } from '@lumino/signaling';
import * as React from 'react';
import { act } from 'react';

import { ContainerFacts } from '../src/components/containers/ContainerFacts';
import { ReclaimWarning } from '../src/components/containers/Reclaims';
import { GPUSection } from '../src/components/hosts/GPUSection';
import { KernelBadge } from '../src/components/notebook/KernelBadge';
import { ReleaseDialogBody } from '../src/components/notebook/ReleaseDialog';
import {
  containerGPUUse,
  GPUIndexes,
  KernelBadgeModel,
  KernelUsages
} from '../src/models';
import type {
  IHostUsage,
  IKernelInfo,
  IKernelUsage,
  IReclaim
} from '../src/types';
import { collapse, render, trans } from './dom';
import {
  devContainer,
  gpu,
  gpuUsage,
  host,
  hostUsage,
  kernelGPU,
  kernelUsage,
  processUse
} from './fixtures';

/** The text of each of the GPU's users on the host card. */
function usersOf(root: HTMLElement, uuid: string): string[] {
  return [
    ...root.querySelectorAll(
      `[data-testid="gpudev-gpu-users-${uuid}"] .jp-gpudev-gpu-user`
    )
  ].map(item => collapse(item.textContent));
}

describe('GPUSection with GPU use', () => {
  const inventory = host('h', [gpu('GPU-a', 0), gpu('GPU-b', 1)]).gpus;

  it('lists each GPU by owner: gpudev owners, another user, processes of no container', () => {
    // Given the use of GPU-a by ada's two containers (one left-behind
    // process), another user, and processes of no dev container
    const usage = hostUsage('h', [
      gpuUsage('GPU-a', 0, [
        processUse('c1', { memory_used_mib: 4300, sm_percent: 30 }),
        processUse('c2', { memory_used_mib: 1000, sm_percent: 7 }),
        processUse('c1', { orphan: true, memory_used_mib: 2048 }),
        processUse(null, {
          kind: 'another user',
          owner: 'another user',
          pid: null,
          memory_used_mib: 8192
        }),
        processUse(null, {
          kind: 'other',
          owner: null,
          pid: null,
          memory_used_mib: 100
        })
      ]),
      gpuUsage('GPU-b', 1)
    ]);
    const { container } = render(
      <GPUSection
        inventory={inventory}
        leases={[]}
        usage={usage}
        trans={trans}
      />
    );
    // Then each holder reads its memory and SM time, most memory first
    expect(usersOf(container, 'GPU-a')).toEqual([
      'another user8.0 GiB',
      'ada5.2 GiB · 37%',
      'adaleft behind2.0 GiB',
      'not gpudev100 MiB'
    ]);
    // And an idle GPU lists nobody
    expect(usersOf(container, 'GPU-b')).toEqual([]);
  });

  it("names an administrator's view of a process by its PID and user id", () => {
    const usage = hostUsage('h', [
      gpuUsage('GPU-a', 0, [
        processUse(null, {
          kind: 'other',
          owner: null,
          pid: 77,
          uid: 1001,
          memory_used_mib: 300
        })
      ])
    ]);
    const { container } = render(
      <GPUSection
        inventory={inventory}
        leases={[]}
        usage={usage}
        trans={trans}
      />
    );
    expect(usersOf(container, 'GPU-a')).toEqual(['PID 77 (uid 1001)300 MiB']);
  });

  it('says why the use by owner is unknown, and when the driver did not list processes', () => {
    // Given a host whose processes cannot be read: said once, not per GPU
    const usage = hostUsage(
      'h',
      [
        gpuUsage('GPU-a', 0, [], { processes_listed: false }),
        gpuUsage('GPU-b', 1, [], { processes_listed: false })
      ],
      'GPU use per process needs commands on the host'
    );
    const { get, query, rerender } = render(
      <GPUSection
        inventory={inventory}
        leases={[]}
        usage={usage}
        trans={trans}
      />
    );
    expect(get('gpudev-usage-reason').textContent).toBe(
      'GPU use by owner unavailable: GPU use per process needs commands on the host'
    );
    expect(query('gpudev-gpu-users-GPU-a')).toBeNull();
    // Given a host read, one of whose GPUs the driver did not list
    rerender(
      <GPUSection
        inventory={inventory}
        leases={[]}
        usage={hostUsage('h', [
          gpuUsage('GPU-a', 0, [], { processes_listed: false }),
          gpuUsage('GPU-b', 1)
        ])}
        trans={trans}
      />
    );
    expect(query('gpudev-usage-reason')).toBeNull();
    expect(get('gpudev-gpu-users-GPU-a').textContent).toBe(
      'Processes not listed'
    );
  });

  it('shows no use without it (a server from before the usage route)', () => {
    const { container } = render(
      <GPUSection inventory={inventory} leases={[]} trans={trans} />
    );
    expect(container.querySelector('.jp-gpudev-gpu-users')).toBeNull();
  });
});

describe('ContainerFacts with GPU use', () => {
  const usage: IHostUsage = hostUsage('local', [
    gpuUsage('GPU-a', 0, [
      processUse('c1', { kernel: 'k1', memory_used_mib: 4300, sm_percent: 37 }),
      processUse('c1', { memory_used_mib: 512, sm_percent: null }),
      processUse('c1', { kernel: 'k0', orphan: true, memory_used_mib: 2048 })
    ]),
    gpuUsage('GPU-b', 1)
  ]);

  function renderFacts(state = 'running', gpuUUIDs = ['GPU-a', 'GPU-b']) {
    const container = devContainer('c1', { state, gpu_uuids: gpuUUIDs });
    return render(
      <ContainerFacts
        container={container}
        running={state === 'running'}
        gpuUse={containerGPUUse(usage, 'c1', gpuUUIDs)}
        trans={trans}
      />
    );
  }

  it('shows per GPU its kernels, its other processes and the memory left behind, flagged', () => {
    const { get } = renderFacts();
    expect(collapse(get('gpudev-container-gpu-use-c1-GPU-a').textContent)).toBe(
      'GPU 0 · H100kernels 4.2 GiB · 37%other 512 MiBleft behind 2.0 GiB'
    );
    const orphan = get('gpudev-container-orphan-c1-GPU-a');
    expect(orphan.classList.contains('jp-gpudev-badge-warn')).toBe(true);
    expect(orphan.title).toContain('Left behind');
    // A leased GPU it does not use
    expect(collapse(get('gpudev-container-gpu-use-c1-GPU-b').textContent)).toBe(
      'GPU 1 · H100nothing running'
    );
    // The tooltip gives the whole GPU's use
    expect(get('gpudev-container-gpu-use-c1-GPU-a').title).toContain(
      'Whole GPU: 29.3 GiB of 79.6 GiB used, 45% utilization'
    );
  });

  it('shows no use for a stopped container', () => {
    const { query } = renderFacts('exited');
    expect(query('gpudev-container-gpu-use-c1')).toBeNull();
  });
});

describe('what a kernel holds, before it is released', () => {
  const info: IKernelInfo = {
    kernel_id: 'k1',
    container: 'c1',
    host: 'local',
    environment: 'gpu',
    gpu_uuids: ['GPU-1'],
    shared: false,
    state: 'running',
    pod: false
  };

  it('says it in the release dialog when known', () => {
    const usage = kernelUsage('k1', [kernelGPU('GPU-1', { sm_percent: 0 })]);
    const { get, rerender, query } = render(
      <ReleaseDialogBody
        info={info}
        indexes={new Map()}
        usage={usage}
        trans={trans}
      />
    );
    expect(get('gpudev-release-holds').textContent).toBe(
      'It holds 4.2 GiB on H100 GPU 0, 0% now.'
    );
    // Unknown: nothing said
    rerender(
      <ReleaseDialogBody
        info={info}
        indexes={new Map()}
        usage={{ ...usage, reason: 'tcp:// host' }}
        trans={trans}
      />
    );
    expect(query('gpudev-release-holds')).toBeNull();
  });

  it('says it in the idle warning of the container row', () => {
    const reclaim: IReclaim = {
      kernel_id: 'k1',
      container: 'c1',
      environment: 'gpu',
      gpu_uuids: ['GPU-1'],
      gpus: 1,
      idle_seconds: 1500,
      reclaim_at: 1700000000
    };
    const { get } = render(
      <ReclaimWarning
        reclaim={reclaim}
        holding={kernelUsage('k1', [kernelGPU('GPU-1', { sm_percent: 0 })])}
        pending={undefined}
        onAction={() => undefined}
        trans={trans}
      />
    );
    expect(get('gpudev-reclaim-c1').textContent).toMatch(
      /^Idle GPU kernel \(4\.2 GiB on H100 GPU 0, 0% now\): released at .+ unless kept/
    );
  });
});

describe('KernelBadge', () => {
  /** Wait, the way React expects, until `done()` holds (1 s at most). */
  async function until(done: () => boolean): Promise<void> {
    for (let i = 0; i < 100 && !done(); i++) {
      await act(async () => {
        await new Promise(resolve => setTimeout(resolve, 10));
      });
    }
    expect(done()).toBe(true);
  }

  it("shows the kernel's GPU use, polled only while the item is on screen", async () => {
    // Given a notebook whose kernel is a gpudev one with a GPU
    const fetchKernelUsage = jest.fn((id: string): Promise<IKernelUsage> =>
      Promise.resolve(kernelUsage(id))
    );
    const usages = new KernelUsages({ fetchKernelUsage });
    const sessionContext = {
      kernelChanged: new Signal<unknown, unknown>({}),
      statusChanged: new Signal<unknown, string>({}),
      session: { kernel: { id: 'k1' } }
    } as unknown as ISessionContext;
    const model = new KernelBadgeModel({
      sessionContext,
      indexes: new GPUIndexes({ settings: {} as never }),
      settings: {} as never,
      usages,
      fetchKernelInfo: () =>
        Promise.resolve({
          kernel_id: 'k1',
          container: 'c1',
          host: 'local',
          environment: 'gpu',
          gpu_uuids: ['GPU-1'],
          shared: false,
          state: 'running',
          pod: false
        })
    });
    const badge = new KernelBadge({ model, trans });
    act(() => {
      Widget.attach(badge, document.body);
    });
    // When the item shows the kernel, its use is asked for and shown
    await until(
      () => badge.node.querySelector('.jp-gpudev-kernel-usage') !== null
    );
    expect(model.visible).toBe(true);
    const usage = badge.node.querySelector<HTMLElement>(
      '[data-testid="gpudev-kernel-usage"]'
    );
    expect(usage?.textContent).toBe('H100 · 4.2 GiB · 37%');
    expect(usage?.title).toContain('whole GPU: 29.3 GiB of 79.6 GiB used');

    // When the notebook is hidden (another tab), the poll stands by
    act(() => {
      badge.hide();
    });
    expect(model.visible).toBe(false);
    act(() => {
      badge.show();
    });
    expect(model.visible).toBe(true);

    // And once the notebook is closed, nothing polls any more
    act(() => {
      Widget.detach(badge);
    });
    expect(model.visible).toBe(false);
    badge.dispose();
    model.dispose();
    expect(usages.size).toBe(0);
    usages.dispose();
  });
});
