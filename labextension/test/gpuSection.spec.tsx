/**
 * The GPUs of a host card (components/hosts/GPUSection): a host without
 * GPU and why, each GPU free or held and by whom (a MIG instance's lease
 * holds its GPU), memory and utilisation, MIG instances, warnings.
 */
import * as React from 'react';

import { GPUSection } from '../src/components/hosts/GPUSection';
import type { IGPUInventory, IGPULease } from '../src/types';
import { collapse, render, trans } from './dom';
import { gpu, host, lease } from './fixtures';

function inventory(extra: Partial<IGPUInventory> = {}): IGPUInventory {
  return { ...host('h').gpus, ...extra };
}

function renderSection(inv: IGPUInventory, leases: IGPULease[] = []) {
  const view = render(
    <GPUSection inventory={inv} leases={leases} trans={trans} />
  );
  return {
    ...view,
    /** The text of one GPU's item. */
    gpuText: (uuid: string) =>
      collapse(view.get(`gpudev-gpu-${uuid}`).textContent),
    state: (uuid: string) => view.get(`gpudev-gpu-state-${uuid}`).textContent,
    holders: (uuid: string) =>
      [
        ...view.container.querySelectorAll(
          `[data-testid="gpudev-gpu-holder-${uuid}"]`
        )
      ].map(p => p.textContent)
  };
}

describe('GPUSection', () => {
  it('says a host has no GPU, and why', () => {
    // Given a host whose inventory found none
    const { text, container } = renderSection(
      inventory({ source: 'none', reason: 'nvidia-smi not found' })
    );
    // Then it says so, with the reason, and lists no GPU
    expect(text()).toContain('No GPU');
    expect(text()).toContain('nvidia-smi not found');
    expect(container.querySelector('.jp-gpudev-gpus')).toBeNull();
  });

  it('shows the driver and CUDA versions of the host', () => {
    const { container } = renderSection(
      inventory({
        gpus: [gpu('GPU-a', 0)],
        driver_version: '550.54',
        cuda_version: '12.4'
      })
    );
    expect(container.querySelector('h5')?.textContent).toBe(
      'GPUs driver 550.54 · CUDA 12.4'
    );
  });

  it('lists each GPU, free or held by the container leasing it', () => {
    // Given two GPUs, the first leased by container c1 of ada
    const { state, holders, gpuText } = renderSection(
      inventory({ gpus: [gpu('GPU-a', 0), gpu('GPU-b', 1)] }),
      [lease('c1', ['GPU-a'], { since: 'yesterday' })]
    );
    // Then the first is held, by c1 (ada), since when
    expect(state('GPU-a')).toBe('held');
    expect(holders('GPU-a')).toEqual(['Held by c1 (ada) since yesterday']);
    // And the second is free
    expect(state('GPU-b')).toBe('free');
    expect(holders('GPU-b')).toEqual([]);
    expect(gpuText('GPU-b')).toContain('NVIDIA A100');
  });

  it("names another user's lease by its owner only", () => {
    // Given leases of other users (their containers not said), one without owner
    const { holders } = renderSection(
      inventory({ gpus: [gpu('GPU-a', 0), gpu('GPU-b', 1)] }),
      [
        lease('', ['GPU-a'], { lease_id: '', owner: 'bob', since: 'noon' }),
        lease('', ['GPU-b'], { lease_id: '', owner: '', since: 'noon' })
      ]
    );
    expect(holders('GPU-a')).toEqual(['Held by bob since noon']);
    expect(holders('GPU-b')).toEqual(['Held by another user since noon']);
  });

  it("shows today's lease by its time, an older one with its day", () => {
    // Given a lease taken today at 09:05 local time, and one in 2025
    const today = new Date();
    today.setHours(9, 5, 0, 0);
    const { holders } = renderSection(
      inventory({ gpus: [gpu('GPU-a', 0), gpu('GPU-b', 1)] }),
      [
        lease('c1', ['GPU-a'], { since: today.toISOString() }),
        lease('c2', ['GPU-b'], { since: '2025-03-14T12:00:00Z' })
      ]
    );
    // Then today's reads the time, without the day
    const month = (date: Date) => date.toLocaleString([], { month: 'short' });
    const todays = holders('GPU-a')[0] ?? '';
    expect(todays).toMatch(/^Held by c1 \(ada\) since .*09.05/);
    expect(todays).not.toContain(month(today));
    // And the older one its month too
    expect(holders('GPU-b')[0]).toContain(
      `since ${month(new Date('2025-03-14T12:00:00Z'))}`
    );
  });

  it('frees a GPU when its lease goes', () => {
    // Given a held GPU
    const inv = inventory({ gpus: [gpu('GPU-a', 0)] });
    const { state, rerender } = renderSection(inv, [lease('c1', ['GPU-a'])]);
    expect(state('GPU-a')).toBe('held');
    // When the next listing has no lease
    rerender(<GPUSection inventory={inv} leases={[]} trans={trans} />);
    // Then it is free
    expect(state('GPU-a')).toBe('free');
  });

  it('holds a GPU in MIG mode when one of its instances is leased, naming each lease once', () => {
    // Given a GPU with three MIG instances, two leased by one container
    const mig = (uuid: string, index: number) => ({
      uuid,
      index,
      profile: '1g.10gb',
      memory_total_mib: 9984
    });
    const { state, holders, get } = renderSection(
      inventory({
        gpus: [
          gpu('GPU-m', 0, {
            mig_enabled: true,
            mig_devices: [mig('MIG-1', 1), mig('MIG-2', 2), mig('MIG-3', 3)]
          })
        ]
      }),
      [lease('c1', ['MIG-1', 'MIG-2'], { since: 'noon' })]
    );
    // Then the GPU is held, by c1 once
    expect(state('GPU-m')).toBe('held');
    expect(holders('GPU-m')).toEqual(['Held by c1 (ada) since noon']);
    // And each instance is listed with its profile and memory
    expect(get('gpudev-mig-MIG-2').textContent).toBe('MIG 21g.10gb9,984 MiB');
  });

  it('says when MIG is enabled without instances', () => {
    const { gpuText } = renderSection(
      inventory({ gpus: [gpu('GPU-e', 0, { mig_enabled: true })] })
    );
    expect(gpuText('GPU-e')).toContain('MIG enabled, no instances');
  });

  it('shows memory used and utilisation', () => {
    // Given a GPU with 1,024 of 40,960 MiB used, 37% busy
    const { get, gpuText } = renderSection(
      inventory({
        gpus: [
          gpu('GPU-a', 0, {
            memory_total_mib: 40960,
            memory_used_mib: 1024,
            utilization_percent: 37
          })
        ]
      })
    );
    // Then it reads its memory and utilisation, and its bar says how full
    expect(gpuText('GPU-a')).toContain('1,024 / 40,960 MiB');
    expect(gpuText('GPU-a')).toContain('37% util');
    const bar = get('gpudev-gpu-GPU-a').querySelector('[role="progressbar"]');
    expect(bar?.getAttribute('aria-label')).toBe('Memory used on GPU 0');
    expect(bar?.getAttribute('aria-valuenow')).toBe('1024');
    expect(bar?.getAttribute('aria-valuemax')).toBe('40960');
  });

  it('marks a GPU whose memory is nearly full', () => {
    const { get } = renderSection(
      inventory({
        gpus: [
          gpu('GPU-a', 0, { memory_total_mib: 1000, memory_used_mib: 950 })
        ]
      })
    );
    const bar = get('gpudev-gpu-GPU-a').querySelector('[role="progressbar"]');
    expect(bar?.classList.contains('jp-gpudev-mod-high')).toBe(true);
  });

  it('says when memory and utilisation are unknown', () => {
    const { get, gpuText } = renderSection(
      inventory({ gpus: [gpu('GPU-a', 0)] })
    );
    expect(gpuText('GPU-a')).toContain('Memory: unknown');
    expect(gpuText('GPU-a')).toContain('util n/a');
    expect(
      get('gpudev-gpu-GPU-a').querySelector('[role="progressbar"]')
    ).toBeNull();
  });

  it("lists a GPU's details and the inventory's warnings", () => {
    const { gpuText, container } = renderSection(
      inventory({
        gpus: [gpu('GPU-a', 0, { pci_bus_id: '00000000:3B:00.0' })],
        warnings: ['NVML failed; nvidia-smi was used']
      })
    );
    expect(gpuText('GPU-a')).toContain('UUIDGPU-a');
    expect(gpuText('GPU-a')).toContain('PCI bus00000000:3B:00.0');
    expect(gpuText('GPU-a')).toContain('MIG modedisabled');
    expect(container.querySelector('.jp-gpudev-warnings')?.textContent).toBe(
      'NVML failed; nvidia-smi was used'
    );
  });
});
