import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import type { GPUDevAPIError } from '../api';
import type { IHostInfo } from '../tokens';

/**
 * The body of the "Show details" dialog: the server's message, the error
 * code and status, and each host the server listed with its reason.
 */
export function ErrorDetails({
  error,
  hosts,
  trans
}: {
  error: GPUDevAPIError;
  hosts: readonly IHostInfo[];
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <div className="jp-gpudev-error-details">
      <p className="jp-gpudev-error-message">{error.message}</p>
      <p className="jp-gpudev-muted">
        {error.status > 0
          ? trans.__('Error "%1" (HTTP %2)', error.code, error.status)
          : trans.__('Error "%1" (no answer from the server)', error.code)}
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
    </div>
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
