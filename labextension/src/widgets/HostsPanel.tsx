import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
import { nullTranslator } from '@jupyterlab/translation';
import type { ITranslator, TranslationBundle } from '@jupyterlab/translation';
import { addIcon, ReactWidget, refreshIcon } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { toAPIError } from '../api';
import type { GPUDevAPIError } from '../api';
import { chipIcon } from '../icons';
import { leasesByGPU } from '../model';
import type {
  ContainersModel,
  HostAction,
  HostsModel,
  IHostsState,
  ReclaimsModel
} from '../model';
import type {
  IAddHostRequest,
  IEngineInfo,
  IGPUInfo,
  IGPUInventory,
  IGPULease,
  IHostInfo,
  IMigDevice
} from '../tokens';
import { ContainersSection, EnvironmentsSection } from './ContainersView';
import type { OpenContainerView, OpenTerminal } from './ContainersView';
import { errorCodeText, notifyError } from './ErrorDetails';
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
    this._openView = options.openView;
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
        openView={this._openView}
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
  private readonly _openView: OpenContainerView | undefined;
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
    /**
     * Opens the commit dialog or the logs of a dev container in the main
     * area; gives containers Commit, Push and Logs buttons.
     */
    openView?: OpenContainerView;
    translator?: ITranslator;
  }
}

interface IViewProps {
  model: HostsModel;
  containers?: ContainersModel | null;
  reclaims?: ReclaimsModel | null;
  openTerminal?: OpenTerminal;
  openView?: OpenContainerView;
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
  openView,
  trans
}: IViewProps): React.JSX.Element {
  const state = useModelState(model);
  const [refreshing, setRefreshing] = React.useState(false);
  const [adding, setAdding] = React.useState(false);
  const hostsHeadingId = React.useId();
  const formId = React.useId();
  const addButton = React.useRef<HTMLButtonElement>(null);

  const openForm = React.useCallback(() => {
    setAdding(true);
  }, []);
  const closeForm = React.useCallback(() => {
    setAdding(false);
    // Back to where the form was opened from (the header's button).
    requestAnimationFrame(() => {
      addButton.current?.focus();
    });
  }, []);
  const onAdded = React.useCallback(
    (host: IHostInfo) => {
      Notification.success(trans.__('GPU Dev: host %1 added', host.name), {
        autoClose: 5000
      });
      closeForm();
    },
    [closeForm, trans]
  );
  const onRemoved = React.useCallback(() => {
    // The removed card had the focus: give it to the header's button.
    addButton.current?.focus();
  }, []);

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
        <div className="jp-gpudev-section-header">
          <h3 id={hostsHeadingId} className="jp-gpudev-section-heading">
            {trans.__('Hosts')}
          </h3>
          <button
            ref={addButton}
            type="button"
            className="jp-gpudev-button jp-gpudev-mod-small"
            data-testid="gpudev-add-host"
            aria-expanded={adding}
            aria-controls={adding ? formId : undefined}
            title={trans.__(
              'Add a remote Docker host, reached over SSH (or TCP)'
            )}
            onClick={() => {
              if (adding) {
                closeForm();
              } else {
                openForm();
              }
            }}
          >
            <addIcon.react tag="span" className="jp-gpudev-button-icon" />
            {trans.__('Add host')}
          </button>
        </div>
        {adding && (
          <div className="jp-gpudev-body jp-gpudev-mod-form">
            <AddHostForm
              id={formId}
              model={model}
              onAdded={onAdded}
              onCancel={closeForm}
              trans={trans}
            />
          </div>
        )}
        <div
          className="jp-gpudev-body"
          aria-busy={state.status === 'loading'}
          aria-live="polite"
        >
          <Body
            state={state}
            model={model}
            adding={adding}
            onAddHost={openForm}
            onRemoved={onRemoved}
            trans={trans}
          />
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
            openView={openView}
            trans={trans}
          />
        </>
      )}
    </div>
  );
}

function Body({
  state,
  model,
  adding,
  onAddHost,
  onRemoved,
  trans
}: {
  state: IHostsState;
  model: HostsModel;
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
              onRemoved={onRemoved}
              trans={trans}
            />
          ))}
        </ul>
      )}
    </>
  );
}

/** The fields of the Add host form, as typed. */
interface IHostFields {
  name: string;
  url: string;
  identityFile: string;
  knownHosts: string;
  workspace: string;
}

type FieldErrors = Partial<Record<keyof IHostFields, string>>;

const EMPTY_FIELDS: IHostFields = {
  name: '',
  url: '',
  identityFile: '',
  knownHosts: '',
  workspace: ''
};

/** What is wrong with the fields before asking the server, by field. */
function checkHostFields(
  fields: IHostFields,
  trans: TranslationBundle
): FieldErrors {
  const errors: FieldErrors = {};
  if (!fields.name.trim()) {
    errors.name = trans.__('Enter a name for the host.');
  } else if (/[\s/]/.test(fields.name.trim())) {
    errors.name = trans.__('A name has no spaces or slashes.');
  }
  const url = fields.url.trim();
  if (!url) {
    errors.url = trans.__('Enter the URL of the host.');
  } else if (!/^(ssh|tcp):\/\/[^\s/]+\/?$/.test(url)) {
    errors.url = trans.__(
      'Use ssh://user@host, ssh://user@host:port or tcp://host:port.'
    );
  }
  const workspace = fields.workspace.trim();
  if (workspace && !workspace.startsWith('/')) {
    errors.workspace = trans.__(
      'An absolute path on that host, such as /home/user/work.'
    );
  }
  return errors;
}

/** The request the form's fields make; empty optional fields are left out. */
function hostRequest(fields: IHostFields): IAddHostRequest {
  const request: IAddHostRequest = {
    name: fields.name.trim(),
    url: fields.url.trim()
  };
  const identityFile = fields.identityFile.trim();
  const knownHosts = fields.knownHosts.trim();
  const workspace = fields.workspace.trim();
  if (identityFile) {
    request.identity_file = identityFile;
  }
  if (knownHosts) {
    request.known_hosts = knownHosts;
  }
  if (workspace) {
    request.workspace = workspace;
  }
  return request;
}

/** The title over an error of `POST /gpudev/api/hosts`. */
function addHostErrorTitle(
  error: GPUDevAPIError,
  trans: TranslationBundle
): string {
  switch (error.status) {
    case 400:
      return trans.__('The host was not added: check its settings');
    case 409:
      return trans.__('A host with this name exists');
    case 503:
      return trans.__('Could not connect to the host');
    default:
      return trans.__('The host was not added');
  }
}

/**
 * The Add host form: name, URL, key files and remote workspace. It keeps
 * what was typed when the server refuses the host, and shows why in full.
 */
function AddHostForm({
  id,
  model,
  onAdded,
  onCancel,
  trans
}: {
  id: string;
  model: HostsModel;
  onAdded: (host: IHostInfo) => void;
  onCancel: () => void;
  trans: TranslationBundle;
}): React.JSX.Element {
  const titleId = React.useId();
  const statusId = React.useId();
  const [fields, setFields] = React.useState<IHostFields>(EMPTY_FIELDS);
  const [fieldErrors, setFieldErrors] = React.useState<FieldErrors>({});
  const [error, setError] = React.useState<GPUDevAPIError | null>(null);
  const [submitting, setSubmitting] = React.useState(false);
  const refs = {
    name: React.useRef<HTMLInputElement>(null),
    url: React.useRef<HTMLInputElement>(null),
    identityFile: React.useRef<HTMLInputElement>(null),
    knownHosts: React.useRef<HTMLInputElement>(null),
    workspace: React.useRef<HTMLInputElement>(null)
  };

  // The name field takes the focus when the form opens.
  const nameRef = refs.name;
  React.useEffect(() => {
    nameRef.current?.focus();
  }, [nameRef]);

  const submit = (): void => {
    if (submitting) {
      return;
    }
    const errors = checkHostFields(fields, trans);
    setFieldErrors(errors);
    const invalid = (Object.keys(refs) as (keyof IHostFields)[]).find(
      key => errors[key] !== undefined
    );
    if (invalid) {
      refs[invalid].current?.focus();
      return;
    }
    setError(null);
    setSubmitting(true);
    model.add(hostRequest(fields)).then(onAdded, (reason: unknown) => {
      const failure = toAPIError(reason);
      setSubmitting(false);
      setError(failure);
      if (failure.status === 409) {
        setFieldErrors({ name: trans.__('This name is taken.') });
      }
    });
  };

  const field = (
    key: keyof IHostFields,
    label: string,
    options: {
      placeholder: string;
      hint?: string;
      required?: boolean;
      type?: 'text' | 'url';
    }
  ): React.JSX.Element => {
    const inputId = `${id}-${key}`;
    const hintId = `${inputId}-hint`;
    const errorId = `${inputId}-error`;
    const fieldError = fieldErrors[key];
    const describedBy = [
      options.hint ? hintId : '',
      fieldError !== undefined ? errorId : ''
    ]
      .filter(Boolean)
      .join(' ');
    return (
      <div className="jp-gpudev-form-field">
        <label className="jp-gpudev-field-label" htmlFor={inputId}>
          {label}
          {!options.required && (
            <span className="jp-gpudev-muted"> {trans.__('(optional)')}</span>
          )}
        </label>
        <input
          ref={refs[key]}
          id={inputId}
          className="jp-gpudev-input jp-gpudev-form-input"
          data-testid={`gpudev-add-host-${key}`}
          type="text"
          inputMode={options.type === 'url' ? 'url' : undefined}
          autoComplete="off"
          spellCheck={false}
          placeholder={options.placeholder}
          value={fields[key]}
          readOnly={submitting}
          aria-required={options.required}
          aria-invalid={fieldError !== undefined}
          aria-describedby={describedBy || undefined}
          onChange={event => {
            const value = event.currentTarget.value;
            setFields(current => ({ ...current, [key]: value }));
            if (fieldError !== undefined) {
              setFieldErrors(current => ({ ...current, [key]: undefined }));
            }
          }}
        />
        {options.hint && (
          <span id={hintId} className="jp-gpudev-field-hint">
            {options.hint}
          </span>
        )}
        {fieldError !== undefined && (
          <span id={errorId} className="jp-gpudev-field-error">
            {fieldError}
          </span>
        )}
      </div>
    );
  };

  return (
    <form
      id={id}
      className="jp-gpudev-add-host"
      data-testid="gpudev-add-host-form"
      aria-labelledby={titleId}
      aria-busy={submitting}
      noValidate
      onSubmit={event => {
        event.preventDefault();
        submit();
      }}
      onKeyDown={event => {
        if (event.key === 'Escape' && !submitting) {
          event.preventDefault();
          event.stopPropagation();
          onCancel();
        }
      }}
    >
      <h4 id={titleId} className="jp-gpudev-section-title">
        {trans.__('Add a remote host')}
      </h4>
      {field('name', trans.__('Name'), {
        placeholder: trans.__('gpu-box'),
        required: true
      })}
      {field('url', trans.__('URL'), {
        placeholder: 'ssh://user@gpu-box',
        hint: trans.__('ssh://user@host[:port] or tcp://host:port'),
        required: true,
        type: 'url'
      })}
      {field('identityFile', trans.__('Identity file'), {
        placeholder: '~/.ssh/id_ed25519',
        hint: trans.__('The SSH key, a path on the Jupyter server')
      })}
      {field('knownHosts', trans.__('known_hosts file'), {
        placeholder: '~/.ssh/known_hosts',
        hint: trans.__("Holds the host's SSH key, a path on the Jupyter server")
      })}
      {field('workspace', trans.__('Remote workspace folder'), {
        placeholder: '/home/user/work',
        hint: trans.__('Mounted in its dev containers, a path on that host')
      })}
      {submitting && (
        <p
          id={statusId}
          className="jp-gpudev-form-status"
          data-testid="gpudev-add-host-status"
          role="status"
        >
          {trans.__('Connecting to %1…', fields.url.trim())}
        </p>
      )}
      {error && (
        <div
          className="jp-gpudev-error"
          data-testid="gpudev-add-host-error"
          role="alert"
        >
          <p className="jp-gpudev-error-title">
            {addHostErrorTitle(error, trans)}
          </p>
          <p className="jp-gpudev-error-message jp-gpudev-mod-full">
            {error.message}
          </p>
          <p className="jp-gpudev-muted">{errorCodeText(error, trans)}</p>
        </div>
      )}
      <div className="jp-gpudev-form-actions">
        <button
          type="submit"
          className={
            'jp-gpudev-button jp-gpudev-mod-accept' +
            (submitting ? ' jp-gpudev-mod-busy' : '')
          }
          data-testid="gpudev-add-host-submit"
          aria-disabled={submitting}
          aria-busy={submitting}
          aria-describedby={submitting ? statusId : undefined}
        >
          {submitting ? trans.__('Connecting…') : trans.__('Add host')}
        </button>
        <button
          type="button"
          className="jp-gpudev-button"
          data-testid="gpudev-add-host-cancel"
          onClick={onCancel}
        >
          {trans.__('Cancel')}
        </button>
      </div>
    </form>
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

function HostCard({
  host,
  model,
  pending,
  onRemoved,
  trans
}: {
  host: IHostInfo;
  model: HostsModel;
  pending: HostAction | undefined;
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
  const showGPUs = host.reachable || host.gpus.gpus.length > 0;
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
      {showGPUs && (
        <GPUSection inventory={host.gpus} leases={host.leases} trans={trans} />
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

function GPUSection({
  inventory,
  leases,
  trans
}: {
  inventory: IGPUInventory;
  /** The host's active leases: who holds each GPU. */
  leases: readonly IGPULease[];
  trans: TranslationBundle;
}): React.JSX.Element {
  const holders = React.useMemo(() => leasesByGPU(leases), [leases]);
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
            <GPUItem
              key={gpu.uuid}
              gpu={gpu}
              holders={gpuHolders(gpu, holders)}
              trans={trans}
            />
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

/** The leases holding a GPU or one of its MIG instances. */
function gpuHolders(
  gpu: IGPUInfo,
  holders: ReadonlyMap<string, IGPULease>
): IGPULease[] {
  const found = [gpu.uuid, ...gpu.mig_devices.map(device => device.uuid)]
    .map(uuid => holders.get(uuid))
    .filter((lease): lease is IGPULease => lease !== undefined);
  return [...new Set(found)];
}

/** `gpudev-gpu-1a2b (alice) since 14:05`, the local time of `since`. */
function holderText(lease: IGPULease, trans: TranslationBundle): string {
  const since = new Date(lease.since);
  const when = Number.isNaN(since.getTime())
    ? lease.since
    : since.toDateString() === new Date().toDateString()
      ? since.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })
      : since.toLocaleString([], {
          month: 'short',
          day: 'numeric',
          hour: '2-digit',
          minute: '2-digit'
        });
  return lease.owner
    ? trans.__('%1 (%2) since %3', lease.container, lease.owner, when)
    : trans.__('%1 since %2', lease.container, when);
}

function GPUItem({
  gpu,
  holders,
  trans
}: {
  gpu: IGPUInfo;
  holders: readonly IGPULease[];
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
        <span
          className={
            'jp-gpudev-badge ' +
            (holders.length > 0 ? 'jp-gpudev-badge-warn' : 'jp-gpudev-badge-ok')
          }
          data-testid={`gpudev-gpu-state-${gpu.uuid}`}
        >
          {holders.length > 0 ? trans.__('held') : trans.__('free')}
        </span>
      </div>
      {holders.map(lease => (
        <p
          key={lease.lease_id || lease.container}
          className="jp-gpudev-gpu-holder"
          data-testid={`gpudev-gpu-holder-${gpu.uuid}`}
          title={trans.__('Lease %1', lease.lease_id)}
        >
          {trans.__('Held by %1', holderText(lease, trans))}
        </p>
      ))}
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
