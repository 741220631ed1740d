/**
 * The buttons of a dev container (components/containers/ContainerActions):
 * which its kind and state show, what a click asks for, and how an action
 * under way shows and blocks the others.
 */
import * as React from 'react';

import { ContainerActions } from '../src/components/containers/ContainerActions';
import type { OpenKind } from '../src/components/containers/types';
import type { ContainerAction } from '../src/models';
import type { IDevContainer } from '../src/types';
import { buttonTexts, click, render, trans } from './dom';
import { devContainer } from './fixtures';

const container = (extra: Partial<IDevContainer> = {}): IDevContainer =>
  devContainer('c1', extra);

function renderActions(
  props: {
    container?: IDevContainer;
    running?: boolean;
    pending?: ContainerAction;
    canOpenTerminal?: boolean;
    withViews?: boolean;
  } = {}
) {
  const onAction = jest.fn<undefined, [IDevContainer, ContainerAction]>();
  const openView = jest.fn<undefined, [string, OpenKind]>();
  const view = render(
    <ContainerActions
      container={props.container ?? container()}
      running={props.running ?? true}
      pending={props.pending}
      canOpenTerminal={props.canOpenTerminal ?? true}
      openView={props.withViews === false ? undefined : openView}
      onAction={onAction}
      trans={trans}
    />
  );
  return { ...view, onAction, openView };
}

describe('ContainerActions', () => {
  it('offers a running container commit, push, logs, terminal, stop and pin', () => {
    // Given a running shared container
    const { container: root } = renderActions();
    // Then its buttons are those of a running container: no Start, no Remove
    expect(buttonTexts(root)).toEqual([
      'Commit',
      'Push',
      'Logs',
      'Terminal',
      'Stop',
      'Pin'
    ]);
  });

  it('offers a stopped container start and remove, not stop or terminal', () => {
    // Given an exited container
    const { container: root } = renderActions({
      container: container({ state: 'exited', status: 'Exited (0)' }),
      running: false
    });
    // Then it can be started again or removed
    expect(buttonTexts(root)).toEqual([
      'Commit',
      'Push',
      'Logs',
      'Pin',
      'Start',
      'Remove'
    ]);
  });

  it('says Discard, not Remove, when the container has uncommitted changes', () => {
    // Given a stopped container with 3 changes no commit carried
    const { get } = renderActions({
      container: container({ state: 'exited', uncommitted: 3 }),
      running: false
    });
    // Then its remove button warns that they are thrown away
    const remove = get('gpudev-container-remove-c1');
    expect(remove.textContent).toBe('Discard');
    expect(remove.title).toMatch(/uncommitted changes/);
  });

  it('removes a running pod instead of stopping it', () => {
    // Given a running pod on a Kubernetes host
    const { container: root, get } = renderActions({
      container: container({ pod: true })
    });
    // Then it has no Stop (nor Start) but a Remove that deletes the pod
    expect(buttonTexts(root)).not.toContain('Stop');
    expect(buttonTexts(root)).not.toContain('Start');
    expect(get('gpudev-container-remove-c1').title).toMatch(/Delete the pod/);
  });

  it('hides the terminal without the terminals service, and for a paused container', () => {
    // Given a running container where terminals cannot be opened
    const { query, rerender, onAction } = renderActions({
      canOpenTerminal: false
    });
    // Then no Terminal button shows
    expect(query('gpudev-container-terminal-c1')).toBeNull();
    // And a paused container has none either
    rerender(
      <ContainerActions
        container={container({ state: 'paused' })}
        running={true}
        pending={undefined}
        canOpenTerminal={true}
        openView={undefined}
        onAction={onAction}
        trans={trans}
      />
    );
    expect(query('gpudev-container-terminal-c1')).toBeNull();
  });

  it('cannot pin a container made for one kernel', () => {
    // Given a container that ends with its kernel
    const { query } = renderActions({
      container: container({ kernel_id: 'k1' })
    });
    // Then it has no Pin button
    expect(query('gpudev-container-pin-c1')).toBeNull();
  });

  it('offers nothing for a container being removed, and only Remove for a dead one', () => {
    // Given a container the engine is removing
    const {
      container: root,
      rerender,
      onAction
    } = renderActions({
      container: container({ state: 'removing' }),
      running: false
    });
    // Then nothing can be done to it
    expect(buttonTexts(root)).toEqual([]);
    // And a dead one can be removed, not committed, started or read
    rerender(
      <ContainerActions
        container={container({ state: 'dead' })}
        running={false}
        pending={undefined}
        canOpenTerminal={true}
        openView={jest.fn()}
        onAction={onAction}
        trans={trans}
      />
    );
    const buttons = buttonTexts(root);
    expect(buttons).toContain('Remove');
    for (const absent of ['Commit', 'Push', 'Logs', 'Start', 'Stop']) {
      expect(buttons).not.toContain(absent);
    }
  });

  it('shows no Commit, Push or Logs without a way to open views', () => {
    const { container: root } = renderActions({ withViews: false });
    expect(buttonTexts(root)).toEqual(['Terminal', 'Stop', 'Pin']);
  });

  it('asks for the action of the button clicked, with the container', () => {
    // Given a running container
    const { get, onAction } = renderActions();
    // When the user clicks Stop, then Terminal
    click(get('gpudev-container-stop-c1'));
    click(get('gpudev-container-terminal-c1'));
    // Then the panel is asked to stop it, then to open a terminal in it
    expect(onAction.mock.calls).toEqual([
      [expect.objectContaining({ name: 'c1' }), 'stop'],
      [expect.objectContaining({ name: 'c1' }), 'terminal']
    ]);
  });

  it('pins an unpinned container and unpins a pinned one', () => {
    // Given a pinned container
    const { get, onAction } = renderActions({
      container: container({ pinned: true })
    });
    const pin = get('gpudev-container-pin-c1');
    // Then its pin button reads Unpin, pressed
    expect(pin.textContent).toBe('Unpin');
    expect(pin.getAttribute('aria-pressed')).toBe('true');
    // When it is clicked, the container is unpinned
    click(pin);
    expect(onAction).toHaveBeenCalledWith(
      expect.objectContaining({ name: 'c1' }),
      'unpin'
    );
  });

  it('opens the commit, push and logs views by name', () => {
    const { get, openView, onAction } = renderActions();
    click(get('gpudev-container-commit-c1'));
    click(get('gpudev-container-push-c1'));
    click(get('gpudev-container-logs-c1'));
    expect(openView.mock.calls).toEqual([
      ['c1', 'commit'],
      ['c1', 'push'],
      ['c1', 'logs']
    ]);
    expect(onAction).not.toHaveBeenCalled();
  });

  it('disables every action while one is under way, and names it', () => {
    // Given a container being stopped
    const { get, getAs, onAction } = renderActions({ pending: 'stop' });
    const stop = getAs('gpudev-container-stop-c1', HTMLButtonElement);
    // Then Stop reads Stopping…, busy, and the other actions are disabled
    expect(stop.textContent).toBe('Stopping…');
    expect(stop.getAttribute('aria-busy')).toBe('true');
    for (const action of ['stop', 'terminal', 'pin']) {
      expect(
        getAs(`gpudev-container-${action}-c1`, HTMLButtonElement).disabled
      ).toBe(true);
    }
    // And a click asks for nothing
    click(get('gpudev-container-terminal-c1'));
    expect(onAction).not.toHaveBeenCalled();
    // While the views stay open to the user
    expect(getAs('gpudev-container-logs-c1', HTMLButtonElement).disabled).toBe(
      false
    );
  });

  it('names a pin under way', () => {
    const { get } = renderActions({ pending: 'pin' });
    expect(get('gpudev-container-pin-c1').textContent).toBe('Pinning…');
  });
});
