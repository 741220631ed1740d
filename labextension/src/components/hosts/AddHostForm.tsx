import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { toAPIError } from '../../api/errors';
import type { GPUDevAPIError } from '../../api/errors';
import type { HostsModel } from '../../models/hosts';
import type { IHostInfo } from '../../types';
import { errorCodeText } from '../common/ErrorDetails';
import { checkHostFields, EMPTY_FIELDS, hostRequest } from './hostFields';
import type { FieldErrors, IHostFields } from './hostFields';

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
 * The Add host form: name, URL and key files (a host's workspace, mount roots
 * and nvidia-smi are the administrator's to set, never the form's). It keeps
 * what was typed when the server refuses the host, and shows why in full.
 */
export function AddHostForm({
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
    knownHosts: React.useRef<HTMLInputElement>(null)
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
        hint: trans.__(
          'The SSH key for this host, a path on the Jupyter server (needed for ssh://)'
        )
      })}
      {field('knownHosts', trans.__('known_hosts file'), {
        placeholder: '~/.ssh/known_hosts',
        hint: trans.__("Holds the host's SSH key, a path on the Jupyter server")
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
