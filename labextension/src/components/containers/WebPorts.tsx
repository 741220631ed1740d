import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { webPortURL } from '../../api/containers';
import { toAPIError } from '../../api/errors';
import { isPortNumber } from '../../api/json';
import type { ContainerAction } from '../../models/containers';
import type { IDevContainer } from '../../types';

/** An action on the web ports of a container. */
export type PortAction = Extract<ContainerAction, 'add-port' | 'remove-port'>;

/** Adds or removes a web port; rejects with the server's error. */
export type OnPort = (
  container: IDevContainer,
  action: PortAction,
  port: number
) => Promise<void>;

/**
 * The ports of a container served by the server's proxy, each as an "Open
 * :PORT" link (while the container runs) with a button to stop serving it,
 * and a field to serve one more. Errors are shown under the field.
 */
export function WebPorts({
  container,
  pending,
  onPort,
  trans
}: {
  container: IDevContainer;
  pending: ContainerAction | undefined;
  onPort: OnPort;
  trans: TranslationBundle;
}): React.JSX.Element {
  const name = container.name;
  const labelId = React.useId();
  const inputId = React.useId();
  const errorId = React.useId();
  const inputRef = React.useRef<HTMLInputElement>(null);
  const [text, setText] = React.useState('');
  const [error, setError] = React.useState<string | null>(null);
  // The port whose removal is under way, to label its button.
  const [removing, setRemoving] = React.useState<number | null>(null);
  const running = container.state === 'running';
  const busy = pending !== undefined;
  const adding = pending === 'add-port';
  const ports = container.web_ports;

  const add = (): void => {
    if (busy) {
      return;
    }
    const trimmed = text.trim();
    const port = /^\d{1,5}$/.test(trimmed) ? Number(trimmed) : NaN;
    if (!isPortNumber(port)) {
      setError(trans.__('Enter a port number from 1 to 65535.'));
      inputRef.current?.focus();
      return;
    }
    if (ports.includes(port)) {
      setError(trans.__('Port %1 is already served.', port));
      inputRef.current?.focus();
      return;
    }
    setError(null);
    onPort(container, 'add-port', port).then(
      () => {
        setText('');
      },
      (reason: unknown) => {
        setError(toAPIError(reason).message);
      }
    );
  };

  const remove = (port: number): void => {
    if (busy) {
      return;
    }
    setError(null);
    setRemoving(port);
    onPort(container, 'remove-port', port)
      .catch((reason: unknown) => {
        setError(toAPIError(reason).message);
      })
      .finally(() => {
        setRemoving(null);
        // Its button was disabled meanwhile (and is gone if it went): keep
        // the focus in the web ports.
        inputRef.current?.focus();
      });
  };

  return (
    <div
      className="jp-gpudev-web"
      role="group"
      aria-labelledby={labelId}
      data-testid={`gpudev-web-ports-${name}`}
    >
      <span id={labelId} className="jp-gpudev-web-label">
        {trans.__('Web ports')}
      </span>
      {ports.length > 0 && (
        <ul
          className="jp-gpudev-web-ports"
          aria-label={trans.__('Web ports of %1', name)}
        >
          {ports.map(port => (
            <li key={port} className="jp-gpudev-web-port">
              {running ? (
                <a
                  className="jp-gpudev-web-link"
                  data-testid={`gpudev-web-port-${name}-${port}`}
                  href={webPortURL(name, port)}
                  target="_blank"
                  rel="noopener"
                  title={trans.__(
                    'Open port %1 of %2 in a new browser tab',
                    port,
                    name
                  )}
                >
                  {trans.__('Open :%1', port)}
                </a>
              ) : (
                <span
                  className="jp-gpudev-web-link jp-gpudev-mod-disabled"
                  data-testid={`gpudev-web-port-${name}-${port}`}
                  title={trans.__('Start the container to open port %1', port)}
                >
                  {trans.__(':%1', port)}
                </span>
              )}
              {!container.forward_ports.includes(port) && (
                <button
                  type="button"
                  className="jp-gpudev-icon-button"
                  data-testid={`gpudev-web-port-remove-${name}-${port}`}
                  disabled={busy}
                  aria-busy={removing === port}
                  aria-label={trans.__(
                    'Stop serving port %1 of %2',
                    port,
                    name
                  )}
                  title={trans.__(
                    'Stop serving port %1 (ports of the environment stay served)',
                    port
                  )}
                  onClick={() => {
                    remove(port);
                  }}
                >
                  <span aria-hidden="true">×</span>
                </button>
              )}
            </li>
          ))}
        </ul>
      )}
      <form
        className="jp-gpudev-port-form"
        noValidate
        onSubmit={event => {
          event.preventDefault();
          add();
        }}
      >
        <label htmlFor={inputId} className="jp-gpudev-visually-hidden">
          {trans.__('Port of %1 to serve', name)}
        </label>
        <input
          ref={inputRef}
          id={inputId}
          className="jp-gpudev-input jp-gpudev-port-input"
          data-testid={`gpudev-web-port-input-${name}`}
          type="number"
          inputMode="numeric"
          min={1}
          max={65535}
          step={1}
          placeholder={trans.__('port')}
          value={text}
          readOnly={adding}
          aria-invalid={error !== null}
          aria-describedby={error !== null ? errorId : undefined}
          onChange={event => {
            setText(event.currentTarget.value);
            setError(null);
          }}
        />
        <button
          type="submit"
          className={'jp-gpudev-button' + (adding ? ' jp-gpudev-mod-busy' : '')}
          data-testid={`gpudev-web-port-add-${name}`}
          aria-disabled={busy}
          aria-label={trans.__('Add port to %1', name)}
          aria-busy={adding}
          title={trans.__(
            'Serve this port of the container through the Jupyter server'
          )}
        >
          {adding ? trans.__('Adding…') : trans.__('Add port')}
        </button>
      </form>
      {error !== null && (
        <p
          id={errorId}
          className="jp-gpudev-field-error"
          data-testid={`gpudev-web-port-error-${name}`}
          role="alert"
        >
          {error}
        </p>
      )}
    </div>
  );
}
