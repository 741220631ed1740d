/**
 * An environment's row (components/containers/EnvironmentRow): what it
 * asks for, the start request its form sends (count, host, GPUs named),
 * the counts it refuses, and a start under way.
 */
import * as React from 'react';

import {
  EnvironmentRow,
  gpuRequirementText
} from '../src/components/containers/EnvironmentRow';
import type { IStartState } from '../src/models';
import type { IEnvironment, IHostInfo, IStartRequest } from '../src/types';
import { choose, click, render, submit, trans, type } from './dom';
import { environment, gpu, host, lease } from './fixtures';

function renderRow(
  env: IEnvironment,
  hosts: IHostInfo[] = [],
  start?: IStartState
) {
  const onStart = jest.fn<undefined, [IEnvironment, IStartRequest]>();
  const view = render(
    <EnvironmentRow
      env={env}
      start={start}
      hosts={hosts}
      onStart={onStart}
      trans={trans}
    />
  );
  const name = env.name;
  return {
    ...view,
    onStart,
    gpus: view.getAs(`gpudev-env-gpus-${name}`, HTMLInputElement),
    startButton: view.getAs(`gpudev-env-start-${name}`, HTMLButtonElement),
    hostSelect: view.query(`gpudev-env-host-${name}`),
    /** Choose a host (`''`: any host). */
    chooseHost: (value: string) => {
      choose(view.getAs(`gpudev-env-host-${name}`, HTMLSelectElement), value);
    }
  };
}

/** Two hosts: `a` with two GPUs (the first held), `b` with one. */
function twoHosts(): IHostInfo[] {
  return [
    host(
      'a',
      [gpu('GPU-a0', 0), gpu('GPU-a1', 1)],
      [lease('busy', ['GPU-a0'])]
    ),
    host('b', [gpu('GPU-b0', 0)])
  ];
}

describe('gpuRequirementText', () => {
  it('says what an environment asks for in a few words', () => {
    expect(gpuRequirementText(environment('e', { count: 1 }), trans)).toBe(
      '1 GPU'
    );
    expect(gpuRequirementText(environment('e', { count: 4 }), trans)).toBe(
      '4 GPUs'
    );
    expect(
      gpuRequirementText(environment('e', { mode: 'optional' }), trans)
    ).toBe('GPU optional');
    expect(
      gpuRequirementText(environment('e', { mode: 'none', count: 0 }), trans)
    ).toBe('CPU');
  });
});

describe('EnvironmentRow', () => {
  it('shows the environment, its image and what it asks for', () => {
    // Given an environment asking for two GPUs of a model, with memory
    const { text, container } = renderRow(
      environment('gpu', {
        count: 2,
        model: 'A100',
        min_memory_mib: 40960
      })
    );
    // Then its row names it, its image, and the ask (details in the title)
    expect(text()).toContain('Env gpu');
    expect(text()).toContain('nvcr.io/nvidia/pytorch:24.05-py3');
    const badge = container.querySelector<HTMLElement>('.jp-gpudev-badge');
    expect(badge?.textContent).toBe('2 GPUs');
    expect(badge?.title).toContain('model: A100');
    expect(badge?.title).toMatch(/at least 40.960 MiB of GPU memory/);
  });

  it('says when the image is built from a Dockerfile', () => {
    const { text } = renderRow(environment('built', {}, { image: null }));
    expect(text()).toContain('image built from a Dockerfile');
  });

  it('lists what of its devcontainer.json gpudev does not do', () => {
    // Given an environment whose file asks for features (not installed)
    const note =
      ".devcontainer/e/devcontainer.json: 'features' is ignored: not installed yet";
    const { query } = renderRow(environment('e', {}, { notes: [note] }));
    // Then its row says so, in a list of its own
    const notes = query('gpudev-env-notes-e');
    expect(notes?.textContent).toBe(note);
    expect(notes?.getAttribute('aria-label')).toBe(
      'What gpudev does not do of e'
    );
  });

  it('shows no notes list when there is nothing to say', () => {
    expect(
      renderRow(environment('e', {}, { notes: [] })).query('gpudev-env-notes-e')
    ).toBeNull();
    expect(renderRow(environment('f')).query('gpudev-env-notes-f')).toBeNull();
  });

  it("starts with the environment's own count, sending no count", () => {
    // Given an environment of one GPU and no hosts listed
    const { startButton, gpus, onStart } = renderRow(environment('gpu'));
    expect(gpus.value).toBe('1');
    // When the user clicks Start
    click(startButton);
    // Then the request names the environment only
    expect(onStart).toHaveBeenCalledTimes(1);
    expect(onStart.mock.calls[0]?.[1]).toEqual({ environment: 'gpu' });
  });

  it('sends the count typed in', () => {
    const { startButton, gpus, onStart } = renderRow(environment('gpu'));
    type(gpus, '3');
    click(startButton);
    expect(onStart.mock.calls[0]?.[1]).toEqual({
      environment: 'gpu',
      gpus: 3
    });
  });

  it('refuses a count under one for an environment that needs a GPU', () => {
    // Given an environment that requires a GPU
    const { startButton, gpus, onStart } = renderRow(environment('gpu'));
    // When the user asks for none
    type(gpus, '0');
    // Then the count is marked invalid, Start is disabled and says why
    expect(gpus.getAttribute('aria-invalid')).toBe('true');
    expect(startButton.disabled).toBe(true);
    expect(startButton.title).toBe('Enter a valid number of GPUs');
    // And submitting the form (Enter) starts nothing
    submit(gpus);
    expect(onStart).not.toHaveBeenCalled();
    // Until the count is valid again
    type(gpus, '1');
    expect(startButton.disabled).toBe(false);
    expect(gpus.getAttribute('aria-invalid')).toBe('false');
  });

  it('refuses an empty or fractional count', () => {
    const { startButton, gpus } = renderRow(environment('gpu'));
    type(gpus, '');
    expect(startButton.disabled).toBe(true);
    type(gpus, '1.5');
    expect(startButton.disabled).toBe(true);
  });

  it('lets an optional GPU run on the CPU only', () => {
    // Given an environment whose GPU is optional
    const { startButton, gpus, onStart } = renderRow(
      environment('opt', { mode: 'optional', count: 1 })
    );
    // When the user asks for no GPU
    type(gpus, '0');
    click(startButton);
    // Then the start asks for none
    expect(onStart.mock.calls[0]?.[1]).toEqual({
      environment: 'opt',
      gpus: 0
    });
  });

  it('offers a host choice only with several hosts, and sends the one chosen', () => {
    // Given two hosts
    const { hostSelect, chooseHost, startButton, onStart } = renderRow(
      environment('gpu'),
      twoHosts()
    );
    // Then the host picker offers any host, then each host
    expect(hostSelect).not.toBeNull();
    const options = [...(hostSelect?.querySelectorAll('option') ?? [])].map(
      option => option.textContent
    );
    expect(options).toEqual(['Any host', 'a', 'b']);
    // When the user starts with the default
    click(startButton);
    // Then the server picks the host
    expect(onStart.mock.calls[0]?.[1]).toEqual({ environment: 'gpu' });
    // When the user chooses host b and starts
    chooseHost('b');
    click(startButton);
    expect(onStart.mock.calls[1]?.[1]).toEqual({
      environment: 'gpu',
      host: 'b'
    });
  });

  it('has no host choice with one host', () => {
    const { hostSelect } = renderRow(environment('gpu'), [host('only')]);
    expect(hostSelect).toBeNull();
  });

  it('refuses more GPUs than the chosen host has', () => {
    // Given host b, with one GPU, chosen
    const { chooseHost, startButton, gpus } = renderRow(
      environment('gpu'),
      twoHosts()
    );
    chooseHost('b');
    // When the user asks for two
    type(gpus, '2');
    // Then the count is refused
    expect(gpus.max).toBe('1');
    expect(startButton.disabled).toBe(true);
    // While any host may take two
    chooseHost('');
    expect(startButton.disabled).toBe(false);
  });

  it('leases the GPUs picked by name on the chosen host', () => {
    // Given host a chosen: its GPU 0 is held, GPU 1 free
    const { chooseHost, startButton, gpus, get, getAs, query, onStart } =
      renderRow(environment('gpu'), twoHosts());
    expect(query('gpudev-env-pick-gpu')).toBeNull();
    chooseHost('a');
    expect(get('gpudev-env-pick-gpu').textContent).toBe('Choose GPUs on a');
    expect(getAs('gpudev-env-gpu-gpu-GPU-a0', HTMLInputElement).disabled).toBe(
      true
    );
    // When the user picks GPU 1
    click(get('gpudev-env-gpu-gpu-GPU-a1'));
    // Then the count follows the GPUs picked, read-only
    expect(gpus.value).toBe('1');
    expect(gpus.readOnly).toBe(true);
    expect(get('gpudev-env-pick-gpu').textContent).toBe('1 GPU chosen on a');
    // And the start leases that GPU by UUID, on that host
    click(startButton);
    expect(onStart.mock.calls[0]?.[1]).toEqual({
      environment: 'gpu',
      gpu_uuids: ['GPU-a1'],
      host: 'a'
    });
  });

  it('forgets the GPUs picked when the host changes', () => {
    const { chooseHost, startButton, get, onStart } = renderRow(
      environment('gpu'),
      twoHosts()
    );
    chooseHost('a');
    click(get('gpudev-env-gpu-gpu-GPU-a1'));
    chooseHost('b');
    click(startButton);
    expect(onStart.mock.calls[0]?.[1]).toEqual({
      environment: 'gpu',
      host: 'b'
    });
  });

  it('offers the GPUs of the only host, and none to a CPU environment', () => {
    const only = [host('only', [gpu('GPU-x', 0)])];
    const { query } = renderRow(environment('gpu'), only);
    expect(query('gpudev-env-gpu-gpu-GPU-x')).not.toBeNull();
    const cpu = renderRow(environment('cpu', { mode: 'none', count: 0 }), only);
    expect(cpu.query('gpudev-env-pick-cpu')).toBeNull();
  });

  it('shows a start under way and blocks another', () => {
    // Given a start of this environment pulling its image
    const { startButton, gpus, hostSelect, get, onStart } = renderRow(
      environment('gpu'),
      twoHosts(),
      {
        request: { environment: 'gpu' },
        progress: {
          stage: 'pull',
          message: 'layer 3/7',
          current: 30,
          total: 100
        }
      }
    );
    // Then Start reads Starting…, and the form is disabled
    expect(startButton.textContent).toBe('Starting…');
    expect(startButton.disabled).toBe(true);
    expect(startButton.getAttribute('aria-busy')).toBe('true');
    expect(gpus.disabled).toBe(true);
    expect(hostSelect?.hasAttribute('disabled')).toBe(true);
    // And its progress shows under the row
    const progress = get('gpudev-start-progress-gpu');
    expect(progress.textContent).toContain('Pulling the image');
    expect(progress.textContent).toContain('layer 3/7');
    expect(
      progress
        .querySelector('[role="progressbar"]')
        ?.getAttribute('aria-valuetext')
    ).toBe('30%');
    // And Enter in the form starts nothing
    submit(gpus);
    expect(onStart).not.toHaveBeenCalled();
  });
});
