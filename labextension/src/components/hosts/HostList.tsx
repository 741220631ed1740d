import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { HostsModel, IHostsState } from '../../models/hosts';
import type { IHostUsage } from '../../types';
import { HostCard } from './HostCard';

/**
 * The body of the Hosts section: loading, the error, the hint to add a
 * host when none is reachable, and a card for each host.
 */

export function HostList({
  state,
  model,
  adding,
  onAddHost,
  onRemoved,
  usage,
  trans
}: {
  state: IHostsState;
  model: HostsModel;
  /** Each host's GPU use by process, by host name, when known. */
  usage?: ReadonlyMap<string, IHostUsage>;
  /** Whether the Add host form is open (its hint's button is then hidden). */
  adding: boolean;
  onAddHost: () => void;
  onRemoved: () => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  if (state.status === 'loading') {
    return (
      <p className="jp-gpudev-message" role="status">
        {trans.__('Loading hosts…')}
      </p>
    );
  }
  const hosts = state.hosts;
  // Adding a host helps when the server answers but no engine does (not
  // when the Jupyter server itself is out of reach).
  const noneReachable =
    state.status === 'ready'
      ? hosts.every(host => !host.reachable)
      : state.error?.code === 'engine_unreachable';
  return (
    <>
      {state.status === 'error' && state.error && (
        <div className="jp-gpudev-error" role="alert">
          <p className="jp-gpudev-error-title">
            {state.error.code === 'engine_unreachable'
              ? trans.__('No Docker host is reachable')
              : trans.__('Could not load the hosts')}
          </p>
          <p className="jp-gpudev-error-message">{state.error.message}</p>
        </div>
      )}
      {noneReachable && (
        <div className="jp-gpudev-empty" data-testid="gpudev-hosts-empty">
          {state.status === 'ready' && hosts.length === 0 && (
            <p className="jp-gpudev-empty-title">
              {trans.__('No hosts configured')}
            </p>
          )}
          <p className="jp-gpudev-hint">
            {trans.__(
              'To use another machine, add it as a remote host: it needs a Docker engine and an SSH login with a key (ssh://user@host). Hosts can also be set with c.HostPool.hosts in the Jupyter server configuration.'
            )}
          </p>
          {!adding && (
            <button
              type="button"
              className="jp-gpudev-button jp-gpudev-mod-accept jp-gpudev-empty-action"
              data-testid="gpudev-add-host-empty"
              onClick={onAddHost}
            >
              {trans.__('Add host')}
            </button>
          )}
        </div>
      )}
      {hosts.length > 0 && (
        <ul className="jp-gpudev-hosts" aria-label={trans.__('Docker hosts')}>
          {hosts.map(host => (
            <HostCard
              key={host.name}
              host={host}
              model={model}
              pending={state.pending.get(host.name)}
              usage={usage?.get(host.name) ?? null}
              onRemoved={onRemoved}
              trans={trans}
            />
          ))}
        </ul>
      )}
    </>
  );
}
