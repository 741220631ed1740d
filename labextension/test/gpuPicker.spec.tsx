/**
 * The GPU picker (components/containers/GPUPicker): the units of a host a
 * start can name (a GPU held by another user, whose lease comes without its
 * container, is held, never offered as free; MIG instances one by one), and
 * the checkboxes that choose them.
 */
import * as React from 'react';

import {
  GPUPicker,
  leasableUnits
} from '../src/components/containers/GPUPicker';
import type { ILeasableUnit } from '../src/components/containers/GPUPicker';
import { click, render, trans } from './dom';
import { gpu, host, lease } from './fixtures';

describe('leasableUnits', () => {
  it('holds the GPUs of other users too, without naming their container', () => {
    // Given a GPU of mine, one of another user (no container said), a free one
    const units = leasableUnits(
      host(
        'local',
        [gpu('GPU-a', 0), gpu('GPU-b', 1), gpu('GPU-c', 2)],
        [
          lease('mine', ['GPU-a']),
          lease('', ['GPU-b'], { lease_id: '', owner: 'another user' })
        ]
      )
    );
    // Then each is named by its index and model, with who holds it
    expect(units).toEqual([
      { uuid: 'GPU-a', label: 'GPU 0 · NVIDIA A100', holder: 'mine' },
      { uuid: 'GPU-b', label: 'GPU 1 · NVIDIA A100', holder: 'another user' },
      { uuid: 'GPU-c', label: 'GPU 2 · NVIDIA A100', holder: null }
    ]);
  });

  it('offers the MIG instances of a GPU in MIG mode, held with their GPU', () => {
    // Given a GPU split into two instances, one leased, and a whole GPU leased
    const mig = (uuid: string, index: number) => ({
      uuid,
      index,
      profile: '1g.10gb',
      memory_total_mib: 9984
    });
    const units = leasableUnits(
      host(
        'local',
        [
          gpu('GPU-m', 0, {
            mig_enabled: true,
            mig_devices: [mig('MIG-1', 1), mig('MIG-2', 2)]
          }),
          gpu('GPU-w', 1, {
            mig_enabled: true,
            mig_devices: [mig('MIG-3', 3)]
          })
        ],
        [lease('one', ['MIG-1']), lease('whole', ['GPU-w'])]
      )
    );
    // Then each instance is a unit; a lease of the whole GPU holds them all
    expect(units).toEqual([
      { uuid: 'MIG-1', label: 'GPU 0 · MIG 1g.10gb', holder: 'one' },
      { uuid: 'MIG-2', label: 'GPU 0 · MIG 1g.10gb', holder: null },
      { uuid: 'MIG-3', label: 'GPU 1 · MIG 1g.10gb', holder: 'whole' }
    ]);
  });

  it('offers a GPU in MIG mode without instances as a whole', () => {
    const units = leasableUnits(
      host('local', [gpu('GPU-e', 0, { mig_enabled: true })])
    );
    expect(units.map(unit => unit.uuid)).toEqual(['GPU-e']);
  });
});

describe('GPUPicker', () => {
  const units: ILeasableUnit[] = [
    { uuid: 'GPU-a', label: 'GPU 0 · NVIDIA A100', holder: 'busy' },
    { uuid: 'GPU-b', label: 'GPU 1 · NVIDIA A100', holder: null },
    { uuid: 'GPU-c', label: 'GPU 2 · NVIDIA A100', holder: null }
  ];

  function renderPicker(chosen: string[] = [], disabled = false) {
    const onChange = jest.fn<undefined, [readonly string[]]>();
    const view = render(
      <GPUPicker
        environment="gpu"
        host="a"
        units={units}
        chosen={chosen}
        disabled={disabled}
        onChange={onChange}
        trans={trans}
      />
    );
    const box = (uuid: string) =>
      view.getAs(`gpudev-env-gpu-gpu-${uuid}`, HTMLInputElement);
    return { ...view, onChange, box };
  }

  it('lists every unit, a held one disabled with its holder', () => {
    // Given one held GPU and two free ones, none chosen
    const { get, box, text } = renderPicker();
    // Then the picker invites a choice on the host
    expect(get('gpudev-env-pick-gpu').textContent).toBe('Choose GPUs on a');
    // And the held GPU cannot be chosen, and says who holds it
    expect(box('GPU-a').disabled).toBe(true);
    expect(box('GPU-a').closest('label')?.title).toBe('Held by busy');
    expect(text()).toContain('held by busy');
    // While the free ones can, titled with their UUID
    expect(box('GPU-b').disabled).toBe(false);
    expect(box('GPU-b').closest('label')?.title).toBe('GPU-b');
  });

  it('shows the units chosen, checked, and how many', () => {
    const { get, box } = renderPicker(['GPU-c', 'GPU-b']);
    expect(get('gpudev-env-pick-gpu').textContent).toBe('2 GPUs chosen on a');
    expect(box('GPU-b').checked).toBe(true);
    expect(box('GPU-c').checked).toBe(true);
  });

  it('adds a unit checked after those chosen, in the order chosen', () => {
    // Given GPU 2 chosen
    const { box, onChange } = renderPicker(['GPU-c']);
    // When the user checks GPU 1
    click(box('GPU-b'));
    // Then the choice is GPU 2, then GPU 1
    expect(onChange).toHaveBeenCalledWith(['GPU-c', 'GPU-b']);
  });

  it('drops a unit unchecked', () => {
    const { box, onChange } = renderPicker(['GPU-b', 'GPU-c']);
    click(box('GPU-b'));
    expect(onChange).toHaveBeenCalledWith(['GPU-c']);
  });

  it('changes nothing while disabled (a start under way)', () => {
    // Given the picker disabled
    const { box, container, onChange } = renderPicker([], true);
    // Then its choices are disabled
    expect(container.querySelector('fieldset')?.disabled).toBe(true);
    // And a click chooses nothing
    click(box('GPU-b'));
    expect(onChange).not.toHaveBeenCalled();
  });
});
