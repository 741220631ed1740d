import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { ContainerAction } from '../../models/containers';
import type { IDevContainer } from '../../types';
import type { OpenContainerView, OpenKind } from './types';

const STARTABLE_STATES = new Set(['exited', 'created']);

/** Which of a container's buttons its kind and state allow. */
export interface IAllowedActions {
  commit: boolean;
  terminal: boolean;
  stop: boolean;
  pin: boolean;
  start: boolean;
  remove: boolean;
}

/**
 * The actions a container allows. A pod (on a Kubernetes host) is never
 * stopped and kept: it is removed while it runs. It is committed and pushed
 * like a container (its snapshot is built by its cluster).
 */
export function allowedActions(
  container: IDevContainer,
  running: boolean,
  canOpenTerminal: boolean
): IAllowedActions {
  const exists = container.state !== 'removing' && container.state !== 'dead';
  const pod = container.pod;
  return {
    commit: exists,
    // The server opens terminals in running containers only (not paused ones).
    terminal: canOpenTerminal && container.state === 'running',
    stop: running && !pod,
    // Only a container that kernels share stops (a pod: is deleted) when its
    // last kernel ends, so only one can be pinned; one made for a kernel ends
    // with that kernel.
    pin: container.kernel_id === null && container.state !== 'removing',
    start: !pod && STARTABLE_STATES.has(container.state),
    remove: (pod || !running) && container.state !== 'removing'
  };
}

/**
 * The buttons of a container its state allows: Commit, Push, Logs (given
 * `openView`), Terminal, Stop, Pin/Unpin, Start, Remove (or Discard, with
 * uncommitted changes).
 */
export function ContainerActions({
  container,
  running,
  pending,
  canOpenTerminal,
  openView,
  onAction,
  trans
}: {
  container: IDevContainer;
  running: boolean;
  pending: ContainerAction | undefined;
  canOpenTerminal: boolean;
  openView: OpenContainerView | undefined;
  onAction: (container: IDevContainer, action: ContainerAction) => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  const name = container.name;
  const allowed = allowedActions(container, running, canOpenTerminal);
  const busy = pending !== undefined;
  const uncommitted = container.uncommitted ?? 0;

  const viewButton = (
    kind: OpenKind,
    label: string,
    caption: string
  ): React.JSX.Element => (
    <button
      type="button"
      className="jp-gpudev-button"
      data-testid={`gpudev-container-${kind}-${name}`}
      aria-label={trans.__('%1 %2', label, name)}
      title={caption}
      onClick={() => {
        openView?.(name, kind);
      }}
    >
      {label}
    </button>
  );

  const actionButton = (
    action: ContainerAction,
    label: string,
    busyLabel: string,
    caption: string,
    extraClass = ''
  ): React.JSX.Element => (
    <button
      type="button"
      className={
        'jp-gpudev-button' +
        extraClass +
        (pending === action ? ' jp-gpudev-mod-busy' : '')
      }
      data-testid={`gpudev-container-${action}-${name}`}
      disabled={busy}
      aria-busy={pending === action}
      aria-label={trans.__('%1 %2', label, name)}
      title={caption}
      onClick={() => {
        onAction(container, action);
      }}
    >
      {pending === action ? busyLabel : label}
    </button>
  );

  return (
    <div
      className="jp-gpudev-actions"
      role="group"
      aria-label={trans.__('Actions on %1', name)}
    >
      {openView &&
        allowed.commit &&
        viewButton(
          'commit',
          trans.__('Commit'),
          trans.__(
            'Review the changes as a Dockerfile diff and commit them (write, verify, snapshot, push)'
          )
        )}
      {openView &&
        allowed.commit &&
        viewButton(
          'push',
          trans.__('Push'),
          trans.__('Commit the container as an image and push it to a registry')
        )}
      {openView &&
        container.state !== 'removing' &&
        container.state !== 'dead' &&
        viewButton(
          'logs',
          trans.__('Logs'),
          trans.__('Show the output of the container, following it')
        )}
      {allowed.terminal &&
        actionButton(
          'terminal',
          trans.__('Terminal'),
          trans.__('Opening…'),
          trans.__('Open a terminal with a shell inside the container')
        )}
      {allowed.stop &&
        actionButton(
          'stop',
          trans.__('Stop'),
          trans.__('Stopping…'),
          trans.__('Stop the container and free its GPUs; its files are kept')
        )}
      {allowed.pin && (
        <PinButton
          container={container}
          pending={pending}
          onAction={onAction}
          trans={trans}
        />
      )}
      {allowed.start &&
        actionButton(
          'start',
          trans.__('Start'),
          trans.__('Starting…'),
          trans.__('Start the container again, with the same GPUs')
        )}
      {allowed.remove &&
        (uncommitted > 0
          ? actionButton(
              'remove',
              trans.__('Discard'),
              trans.__('Removing…'),
              trans.__(
                'Remove the container and throw away its uncommitted changes (asks first)'
              ),
              ' jp-gpudev-mod-warn'
            )
          : actionButton(
              'remove',
              trans.__('Remove'),
              trans.__('Removing…'),
              container.pod
                ? trans.__(
                    'Delete the pod and free its GPUs; its workspace claim is kept (asks first if files outside it changed)'
                  )
                : trans.__('Remove the container'),
              ' jp-gpudev-mod-warn'
            ))}
    </div>
  );
}

/** Pin (or unpin) a shared container. */
function PinButton({
  container,
  pending,
  onAction,
  trans
}: {
  container: IDevContainer;
  pending: ContainerAction | undefined;
  onAction: (container: IDevContainer, action: ContainerAction) => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  const name = container.name;
  const pinning = pending === 'pin' || pending === 'unpin';
  return (
    <button
      type="button"
      className={
        'jp-gpudev-button jp-gpudev-pin' +
        (pinning ? ' jp-gpudev-mod-busy' : '')
      }
      data-testid={`gpudev-container-pin-${name}`}
      disabled={pending !== undefined}
      aria-busy={pinning}
      aria-pressed={container.pinned}
      aria-label={trans.__('Pin %1', name)}
      title={
        container.pinned
          ? container.pod
            ? trans.__(
                'Let its pod be deleted when its last kernel ends, unless files outside its workspace changed'
              )
            : trans.__('Let it stop when its last kernel ends')
          : trans.__(
              'Keep it running, with its GPUs, after its last kernel ends'
            )
      }
      onClick={() => {
        onAction(container, container.pinned ? 'unpin' : 'pin');
      }}
    >
      {pending === 'pin'
        ? trans.__('Pinning…')
        : pending === 'unpin'
          ? trans.__('Unpinning…')
          : container.pinned
            ? trans.__('Unpin')
            : trans.__('Pin')}
    </button>
  );
}
