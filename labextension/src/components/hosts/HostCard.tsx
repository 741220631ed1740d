import { Dialog, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { toAPIError } from '../../api/errors';
import type { HostAction, HostsModel } from '../../models/hosts';
import type { IEngineInfo, IHostInfo, IHostUsage } from '../../types';
import { notifyError } from '../common/ErrorDetails';
import { ClusterSection } from './ClusterSection';
import { GPUSection } from './GPUSection';

function transportLabel(
  transport: IHostInfo['transport'],
  trans: TranslationBundle
): string {
  switch (transport) {
    case 'local':
      return trans.__('local socket');
    case 'ssh':
      return trans.__('SSH');
    case 'tcp':
      return trans.__('TCP');
    case 'k8s':
      return trans.__('Kubernetes');
    default:
      return String(transport);
  }
}

function originLabel(
  origin: IHostInfo['origin'],
  trans: TranslationBundle
): string {
  switch (origin) {
    case 'local':
      return trans.__('local');
    case 'config':
      return trans.__('configured');
    case 'added':
      return trans.__('added');
    default:
      return String(origin);
  }
}

/**
 * Ask for confirmation, then remove an added host. A refusal (dev
 * containers left on it) is shown as an error notification.
 */
async function removeHostWithConfirmation(
  model: HostsModel,
  host: IHostInfo,
  trans: TranslationBundle
): Promise<boolean> {
  const result = await showDialog({
    title: trans.__('Remove host %1?', host.name),
    body: (
      <div className="jp-gpudev-error-details">
        <p>
          {trans.__(
            'The server stops using %1 (%2). Nothing on that machine is changed; its dev containers must be removed first.',
            host.name,
            host.url
          )}
        </p>
      </div>
    ),
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      Dialog.warnButton({ label: trans.__('Remove') })
    ],
    defaultButton: 0
  });
  if (!result.button.accept) {
    return false;
  }
  try {
    await model.remove(host.name);
    return true;
  } catch (reason) {
    notifyError(
      trans.__('GPU Dev: could not remove host %1', host.name),
      toAPIError(reason),
      trans
    );
    return false;
  }
}

export function HostCard({
  host,
  model,
  pending,
  usage = null,
  onRemoved,
  trans
}: {
  host: IHostInfo;
  model: HostsModel;
  pending: HostAction | undefined;
  /** The host's GPU use by process; `null` when not known. */
  usage?: IHostUsage | null;
  onRemoved: () => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  const headingId = React.useId();
  const transport = transportLabel(host.transport, trans);
  // "SSH · added"; the local engine is said once ("local socket").
  const kind =
    host.origin === 'local'
      ? transport
      : `${transport} · ${originLabel(host.origin, trans)}`;
  const showGPUs =
    !host.cluster && (host.reachable || host.gpus.gpus.length > 0);
  const removing = pending === 'remove';
  return (
    <li
      className={
        'jp-gpudev-host' + (host.reachable ? '' : ' jp-gpudev-mod-unreachable')
      }
      data-testid={`gpudev-host-${host.name}`}
      aria-labelledby={headingId}
    >
      <div className="jp-gpudev-host-header">
        <h4 id={headingId} className="jp-gpudev-host-name">
          {host.name}
        </h4>
        <span
          className={
            'jp-gpudev-badge ' +
            (host.reachable ? 'jp-gpudev-badge-ok' : 'jp-gpudev-badge-error')
          }
        >
          {host.reachable ? trans.__('reachable') : trans.__('unreachable')}
        </span>
      </div>
      <p className="jp-gpudev-host-url" title={host.url}>
        <span
          className="jp-gpudev-host-kind"
          data-testid={`gpudev-host-kind-${host.name}`}
        >
          {kind}
        </span>{' '}
        · {host.url}
      </p>
      {!host.is_local && host.workspace && (
        <dl className="jp-gpudev-facts">
          <dt>{trans.__('Workspace')}</dt>
          <dd
            className="jp-gpudev-path"
            data-testid={`gpudev-host-workspace-${host.name}`}
          >
            {host.workspace}
          </dd>
        </dl>
      )}
      {!host.reachable && host.reason && (
        <p className="jp-gpudev-reason">{host.reason}</p>
      )}
      {host.engine && <EngineFacts engine={host.engine} trans={trans} />}
      {host.cluster && (
        <ClusterSection
          hostName={host.name}
          cluster={host.cluster}
          trans={trans}
        />
      )}
      {showGPUs && (
        <GPUSection
          inventory={host.gpus}
          leases={host.leases}
          usage={usage}
          trans={trans}
        />
      )}
      {host.origin === 'added' && (
        <div
          className="jp-gpudev-actions"
          role="group"
          aria-label={trans.__('Actions on host %1', host.name)}
        >
          <button
            type="button"
            className={
              'jp-gpudev-button jp-gpudev-mod-warn' +
              (removing ? ' jp-gpudev-mod-busy' : '')
            }
            data-testid={`gpudev-host-remove-${host.name}`}
            disabled={pending !== undefined}
            aria-busy={removing}
            aria-label={trans.__('Remove host %1', host.name)}
            title={trans.__('Stop using this host (it was added from here)')}
            onClick={() => {
              void removeHostWithConfirmation(model, host, trans).then(
                removed => {
                  if (removed) {
                    onRemoved();
                  }
                }
              );
            }}
          >
            {removing ? trans.__('Removing…') : trans.__('Remove')}
          </button>
        </div>
      )}
    </li>
  );
}

function EngineFacts({
  engine,
  trans
}: {
  engine: IEngineInfo;
  trans: TranslationBundle;
}): React.JSX.Element {
  const system = `${engine.os}/${engine.arch}`;
  const details = [engine.operating_system, engine.kernel_version]
    .filter(Boolean)
    .join(' · ');
  return (
    <dl className="jp-gpudev-facts">
      <dt>{trans.__('Engine')}</dt>
      <dd>
        <span data-testid="gpudev-engine-version">
          {trans.__('Docker %1', engine.version)}
        </span>{' '}
        <span className="jp-gpudev-muted">
          {trans.__('API %1', engine.api_version)}
        </span>
      </dd>
      <dt>{trans.__('OS')}</dt>
      <dd title={details || undefined}>
        {system}
        {engine.operating_system && (
          <span className="jp-gpudev-muted"> · {engine.operating_system}</span>
        )}
      </dd>
      <dt>{trans.__('NVIDIA runtime')}</dt>
      <dd>
        {engine.nvidia_runtime ? trans.__('yes') : trans.__('no')}
        {engine.cdi && (
          <span className="jp-gpudev-muted"> · {trans.__('CDI')}</span>
        )}
      </dd>
    </dl>
  );
}
