import { nullTranslator } from '@jupyterlab/translation';
import type { ITranslator, TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget, refreshIcon } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { chipIcon } from '../icons';
import type {
  ContainersModel,
  HostsModel,
  IHostsState,
  ReclaimsModel
} from '../model';
import type {
  IEngineInfo,
  IGPUInfo,
  IGPUInventory,
  IHostInfo,
  IMigDevice
} from '../tokens';
import { ContainersSection, EnvironmentsSection } from './ContainersView';
import type { OpenTerminal } from './ContainersView';
import { useModelState } from './hooks';

/** The id of the panel in the shell (also used by the layout restorer). */
export const PANEL_ID = 'gpudev-panel';

/** The translation domain of this extension. */
export const TRANSLATION_DOMAIN = 'jupyter_gpudev';

/**
 * The left sidebar panel: every Docker host with its engine and GPUs, then
 * (given a `ContainersModel`) the environments and the dev containers.
 */
export class HostsPanel extends ReactWidget {
  constructor(options: HostsPanel.IOptions) {
    super();
    this.model = options.model;
    this.containers = options.containers ?? null;
    this.reclaims = options.reclaims ?? null;
    this._openTerminal = options.openTerminal;
    this._trans = (options.translator ?? nullTranslator).load(
      TRANSLATION_DOMAIN
    );
    this.id = PANEL_ID;
    this.addClass('jp-gpudev-panel');
    this.title.icon = chipIcon;
    this.title.caption = this._trans.__('GPU Dev');
  }

  /** The hosts shown by the panel. */
  readonly model: HostsModel;

  /** The environments and dev containers shown below the hosts, if any. */
  readonly containers: ContainersModel | null;

  /**
   * The idle GPU kernels about to be released, shown in their container's
   * row. Its poll goes on while the panel is hidden (the panel does not
   * drive it).
   */
  readonly reclaims: ReclaimsModel | null;

  protected override onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    // Shown before the shell was attached (a restored layout, an early
    // command): no after-show message comes then, so check here.
    this._setVisible(this.isVisible);
  }

  protected override onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._setVisible(true);
  }

  protected override onAfterHide(msg: Message): void {
    super.onAfterHide(msg);
    this._setVisible(false);
  }

  protected override onBeforeDetach(msg: Message): void {
    this._setVisible(false);
    super.onBeforeDetach(msg);
  }

  protected render(): React.JSX.Element {
    return (
      <HostsView
        model={this.model}
        containers={this.containers}
        reclaims={this.reclaims}
        openTerminal={this._openTerminal}
        trans={this._trans}
      />
    );
  }

  private _setVisible(visible: boolean): void {
    this.model.visible = visible;
    if (this.containers) {
      this.containers.visible = visible;
    }
  }

  private readonly _trans: TranslationBundle;
  private readonly _openTerminal: OpenTerminal | undefined;
}

export namespace HostsPanel {
  export interface IOptions {
    model: HostsModel;
    /** Adds the Environments and Dev containers sections. */
    containers?: ContainersModel;
    /**
     * Adds, in the Dev containers section, a warning with Keep and Release
     * now buttons to the row of each container whose idle GPU kernel is
     * about to be released.
     */
    reclaims?: ReclaimsModel;
    /**
     * Opens a Jupyter terminal by its name in the main area; gives running
     * dev containers a Terminal button.
     */
    openTerminal?: OpenTerminal;
    translator?: ITranslator;
  }
}

interface IViewProps {
  model: HostsModel;
  containers?: ContainersModel | null;
  reclaims?: ReclaimsModel | null;
  openTerminal?: OpenTerminal;
  trans: TranslationBundle;
}

/**
 * The whole panel: header, then loading, error, empty or the host list,
 * then the environments and dev containers when a model for them is given.
 */
export function HostsView({
  model,
  containers,
  reclaims,
  openTerminal,
  trans
}: IViewProps): React.JSX.Element {
  const state = useModelState(model);
  const [refreshing, setRefreshing] = React.useState(false);
  const hostsHeadingId = React.useId();

  const onRefresh = React.useCallback(() => {
    setRefreshing(true);
    void Promise.all([
      model.refresh(),
      containers?.refresh(),
      reclaims?.refresh()
    ]).finally(() => {
      setRefreshing(false);
    });
  }, [model, containers, reclaims]);

  return (
    <div className="jp-gpudev-view">
      <div className="jp-gpudev-header">
        <h2 className="jp-gpudev-title">{trans.__('GPU Dev')}</h2>
        <button
          type="button"
          className={
            'jp-gpudev-refresh' + (refreshing ? ' jp-gpudev-mod-busy' : '')
          }
          aria-label={trans.__('Refresh')}
          title={
            containers
              ? trans.__('Refresh the hosts, environments and dev containers')
              : trans.__('Refresh the host list')
          }
          aria-busy={refreshing}
          onClick={onRefresh}
        >
          <refreshIcon.react tag="span" className="jp-gpudev-refresh-icon" />
        </button>
      </div>
      {state.lastUpdated && (
        <p className="jp-gpudev-updated">
          {trans.__('Updated %1', state.lastUpdated.toLocaleTimeString())}
        </p>
      )}
      <section className="jp-gpudev-section" aria-labelledby={hostsHeadingId}>
        <h3 id={hostsHeadingId} className="jp-gpudev-section-heading">
          {trans.__('Hosts')}
        </h3>
        <div
          className="jp-gpudev-body"
          aria-busy={state.status === 'loading'}
          aria-live="polite"
        >
          <Body state={state} trans={trans} />
        </div>
      </section>
      {containers && (
        <>
          <EnvironmentsSection
            model={containers}
            hosts={state.hosts}
            trans={trans}
          />
          <ContainersSection
            model={containers}
            reclaims={reclaims}
            openTerminal={openTerminal}
            trans={trans}
          />
        </>
      )}
    </div>
  );
}

function Body({
  state,
  trans
}: {
  state: IHostsState;
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
      {state.status === 'ready' && hosts.length === 0 && (
        <div className="jp-gpudev-empty">
          <p className="jp-gpudev-empty-title">
            {trans.__('No hosts configured')}
          </p>
          <p className="jp-gpudev-hint">
            {trans.__(
              'Add Docker hosts with c.HostPool.hosts in the Jupyter server configuration (or keep c.HostPool.include_local enabled), then restart the server.'
            )}
          </p>
        </div>
      )}
      {hosts.length > 0 && (
        <ul className="jp-gpudev-hosts" aria-label={trans.__('Docker hosts')}>
          {hosts.map(host => (
            <HostCard key={host.name} host={host} trans={trans} />
          ))}
        </ul>
      )}
    </>
  );
}

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
    default:
      return String(transport);
  }
}

function HostCard({
  host,
  trans
}: {
  host: IHostInfo;
  trans: TranslationBundle;
}): React.JSX.Element {
  const headingId = React.useId();
  const transport = transportLabel(host.transport, trans);
  const showGPUs = host.reachable || host.gpus.gpus.length > 0;
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
        {transport} · {host.url}
      </p>
      {!host.reachable && host.reason && (
        <p className="jp-gpudev-reason">{host.reason}</p>
      )}
      {host.engine && <EngineFacts engine={host.engine} trans={trans} />}
      {showGPUs && <GPUSection inventory={host.gpus} trans={trans} />}
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

function GPUSection({
  inventory,
  trans
}: {
  inventory: IGPUInventory;
  trans: TranslationBundle;
}): React.JSX.Element {
  const versions = [
    inventory.driver_version && trans.__('driver %1', inventory.driver_version),
    inventory.cuda_version && trans.__('CUDA %1', inventory.cuda_version)
  ]
    .filter(Boolean)
    .join(' · ');
  return (
    <div className="jp-gpudev-gpu-section">
      <h5 className="jp-gpudev-section-title">
        {trans.__('GPUs')}
        {versions && <span className="jp-gpudev-muted"> {versions}</span>}
      </h5>
      {inventory.gpus.length === 0 ? (
        <p className="jp-gpudev-nogpu">
          <span className="jp-gpudev-nogpu-label">{trans.__('No GPU')}</span>
          {inventory.reason && (
            <span className="jp-gpudev-nogpu-reason">{inventory.reason}</span>
          )}
        </p>
      ) : (
        <ul className="jp-gpudev-gpus">
          {inventory.gpus.map(gpu => (
            <GPUItem key={gpu.uuid} gpu={gpu} trans={trans} />
          ))}
        </ul>
      )}
      {inventory.warnings.length > 0 && (
        <ul className="jp-gpudev-warnings">
          {inventory.warnings.map((warning, i) => (
            <li key={i}>{warning}</li>
          ))}
        </ul>
      )}
    </div>
  );
}

const numberFormat = new Intl.NumberFormat();

function mib(value: number | null, trans: TranslationBundle): string {
  return value === null ? trans.__('?') : numberFormat.format(value);
}

function GPUItem({
  gpu,
  trans
}: {
  gpu: IGPUInfo;
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <li
      className="jp-gpudev-gpu"
      data-testid={`gpudev-gpu-${gpu.uuid}`}
      title={trans.__('UUID: %1', gpu.uuid)}
    >
      <div className="jp-gpudev-gpu-header">
        <span className="jp-gpudev-gpu-index">{gpu.index}</span>
        <span className="jp-gpudev-gpu-name">{gpu.name}</span>
      </div>
      <MemoryBar gpu={gpu} trans={trans} />
      {(gpu.mig_enabled || gpu.mig_devices.length > 0) && (
        <MigList gpu={gpu} trans={trans} />
      )}
      <details className="jp-gpudev-gpu-details">
        <summary>{trans.__('Details')}</summary>
        <dl className="jp-gpudev-facts">
          <dt>{trans.__('UUID')}</dt>
          <dd className="jp-gpudev-uuid">{gpu.uuid}</dd>
          {gpu.pci_bus_id && (
            <>
              <dt>{trans.__('PCI bus')}</dt>
              <dd>{gpu.pci_bus_id}</dd>
            </>
          )}
          {gpu.driver_version && (
            <>
              <dt>{trans.__('Driver')}</dt>
              <dd>{gpu.driver_version}</dd>
            </>
          )}
          {gpu.cuda_version && (
            <>
              <dt>{trans.__('CUDA')}</dt>
              <dd>{gpu.cuda_version}</dd>
            </>
          )}
          <dt>{trans.__('MIG mode')}</dt>
          <dd>
            {gpu.mig_enabled ? trans.__('enabled') : trans.__('disabled')}
          </dd>
        </dl>
      </details>
    </li>
  );
}

function MemoryBar({
  gpu,
  trans
}: {
  gpu: IGPUInfo;
  trans: TranslationBundle;
}): React.JSX.Element {
  const total = gpu.memory_total_mib;
  const used = gpu.memory_used_mib;
  const utilisation = (
    <span className="jp-gpudev-gpu-util" title={trans.__('GPU utilisation')}>
      {gpu.utilization_percent === null
        ? trans.__('util n/a')
        : trans.__('%1% util', gpu.utilization_percent)}
    </span>
  );
  if (total === null || total <= 0) {
    return (
      <div className="jp-gpudev-memory">
        <div className="jp-gpudev-memory-stats">
          <span className="jp-gpudev-memory-text">
            {trans.__('Memory: unknown')}
          </span>
          {utilisation}
        </div>
      </div>
    );
  }
  const fraction = used === null ? 0 : Math.min(1, Math.max(0, used / total));
  const text = trans.__('%1 / %2 MiB', mib(used, trans), mib(total, trans));
  return (
    <div className="jp-gpudev-memory">
      <div
        className={
          'jp-gpudev-bar' + (fraction >= 0.9 ? ' jp-gpudev-mod-high' : '')
        }
        role="progressbar"
        aria-label={trans.__('Memory used on GPU %1', gpu.index)}
        aria-valuemin={0}
        aria-valuemax={total}
        aria-valuenow={used ?? undefined}
        aria-valuetext={used === null ? trans.__('unknown') : text}
      >
        <div
          className="jp-gpudev-bar-fill"
          style={{ width: `${(fraction * 100).toFixed(1)}%` }}
        />
      </div>
      <div className="jp-gpudev-memory-stats">
        <span className="jp-gpudev-memory-text">{text}</span>
        {utilisation}
      </div>
    </div>
  );
}

function MigList({
  gpu,
  trans
}: {
  gpu: IGPUInfo;
  trans: TranslationBundle;
}): React.JSX.Element {
  if (gpu.mig_devices.length === 0) {
    return (
      <p className="jp-gpudev-mig-empty">
        {trans.__('MIG enabled, no instances')}
      </p>
    );
  }
  return (
    <ul
      className="jp-gpudev-migs"
      aria-label={trans.__('MIG devices of GPU %1', gpu.index)}
    >
      {gpu.mig_devices.map((device: IMigDevice) => (
        <li
          key={device.uuid}
          className="jp-gpudev-mig"
          data-testid={`gpudev-mig-${device.uuid}`}
          title={trans.__('UUID: %1', device.uuid)}
        >
          <span className="jp-gpudev-mig-index">
            {trans.__('MIG %1', device.index)}
          </span>
          <span className="jp-gpudev-mig-profile">{device.profile}</span>
          {device.memory_total_mib !== null && (
            <span className="jp-gpudev-muted">
              {trans.__('%1 MiB', mib(device.memory_total_mib, trans))}
            </span>
          )}
        </li>
      ))}
    </ul>
  );
}
