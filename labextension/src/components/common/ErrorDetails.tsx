import { Notification, showErrorMessage } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { NETWORK_ERROR } from '../../api/errors';
import type { GPUDevAPIError } from '../../api/errors';
import { stringArray } from '../../api/json';
import type { IHostInfo } from '../../types';

/**
 * The body of the "Show details" dialog: the server's message, the error
 * code and status, each host the server listed with its reason (or, for a
 * start no host could take, why each host could not), and the changed
 * paths of a container that was not removed.
 */
/** The error's code and HTTP status (or that the server did not answer). */
export function errorCodeText(
  error: GPUDevAPIError,
  trans: TranslationBundle
): string {
  if (error.status > 0) {
    return trans.__('Error "%1" (HTTP %2)', error.code, error.status);
  }
  return error.code === NETWORK_ERROR
    ? trans.__('Error "%1" (no answer from the server)', error.code)
    : trans.__('Error "%1"', error.code);
}

export function ErrorDetails({
  error,
  hosts,
  trans
}: {
  error: GPUDevAPIError;
  hosts: readonly IHostInfo[];
  trans: TranslationBundle;
}): React.JSX.Element {
  const changes = stringArray(error.details?.changes);
  const reasons = error.hostReasons;
  return (
    <div className="jp-gpudev-error-details">
      <p className="jp-gpudev-error-message">{error.message}</p>
      <p className="jp-gpudev-muted">
        {error.status > 0
          ? trans.__('Error "%1" (HTTP %2)', error.code, error.status)
          : error.code === NETWORK_ERROR
            ? trans.__('Error "%1" (no answer from the server)', error.code)
            : trans.__('Error "%1"', error.code)}
      </p>
      {hosts.length > 0 && (
        <ul className="jp-gpudev-error-hosts">
          {hosts.map(host => (
            <li key={host.name}>
              <strong>{host.name}</strong>{' '}
              <span className="jp-gpudev-muted">{host.url}</span>
              <div>
                {host.reachable
                  ? trans.__('reachable')
                  : (host.reason ?? trans.__('unreachable'))}
              </div>
            </li>
          ))}
        </ul>
      )}
      {reasons.length > 0 && (
        <>
          <p className="jp-gpudev-muted">
            {trans.__('Why each host could not take it:')}
          </p>
          <ul
            className="jp-gpudev-error-hosts"
            aria-label={trans.__('Hosts and why they could not take it')}
            data-testid="gpudev-error-host-reasons"
          >
            {reasons.map(([name, reason]) => (
              <li key={name}>
                <strong>{name}</strong>: {reason}
              </li>
            ))}
          </ul>
        </>
      )}
      {changes.length > 0 && <ChangedPaths paths={changes} trans={trans} />}
    </div>
  );
}

/** The paths a container changed, as a scrollable list. */
export function ChangedPaths({
  paths,
  trans
}: {
  paths: readonly string[];
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <>
      <p className="jp-gpudev-muted">
        {trans._n('%1 changed path:', '%1 changed paths:', paths.length)}
      </p>
      <ul
        className="jp-gpudev-changes"
        aria-label={trans.__('Changed paths')}
        tabIndex={0}
      >
        {paths.map(path => (
          <li key={path}>{path}</li>
        ))}
      </ul>
    </>
  );
}

/** The same, as an element ready for `showErrorMessage`. */
export function renderErrorDetails(
  error: GPUDevAPIError,
  hosts: readonly IHostInfo[],
  trans: TranslationBundle
): React.ReactElement {
  return <ErrorDetails error={error} hosts={hosts} trans={trans} />;
}

/**
 * Show `error` as an error notification with a "Show details" action that
 * opens a dialog titled `title`.
 */
export function notifyError(
  title: string,
  error: GPUDevAPIError,
  trans: TranslationBundle,
  hosts: readonly IHostInfo[] = error.hosts
): void {
  Notification.error(trans.__('GPU Dev: %1', error.message), {
    autoClose: false,
    actions: [
      {
        label: trans.__('Show details'),
        caption: trans.__('Show the error and what the server said about it'),
        callback: () => {
          void showErrorMessage(title, {
            message: renderErrorDetails(error, hosts, trans)
          });
        }
      }
    ]
  });
}
