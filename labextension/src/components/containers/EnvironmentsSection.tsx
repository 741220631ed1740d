import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { toAPIError } from '../../api/errors';
import type {
  IEnvironment,
  IEnvironmentProblem,
  IHostInfo,
  IStartRequest
} from '../../types';
import { notifyError } from '../common/ErrorDetails';
import { useModelState } from '../common/hooks';
import { EnvironmentRow } from './EnvironmentRow';
import type { ISectionProps } from './types';

/**
 * The "Environments" section: each environment with a Start button, its
 * GPU count and host, the progress of a start, and the broken definitions.
 */
export function EnvironmentsSection({
  model,
  hosts,
  trans
}: ISectionProps & {
  /** The hosts the panel knows; a host can be picked among the reachable. */
  hosts: readonly IHostInfo[];
}): React.JSX.Element {
  const state = useModelState(model);
  const headingId = React.useId();
  const reachable = React.useMemo(
    () => hosts.filter(host => host.reachable),
    [hosts]
  );
  const onStart = React.useCallback(
    (env: IEnvironment, request: IStartRequest) => {
      model.start(request).then(
        container => {
          Notification.success(
            trans.__('GPU Dev: %1 is running', container.name),
            { autoClose: 5000 }
          );
        },
        (reason: unknown) => {
          notifyError(
            trans.__('GPU Dev: could not start %1', env.display_name),
            toAPIError(reason),
            trans
          );
        }
      );
    },
    [model, trans]
  );

  return (
    <section className="jp-gpudev-section" aria-labelledby={headingId}>
      <h3 id={headingId} className="jp-gpudev-section-heading">
        {trans.__('Environments')}
      </h3>
      <div className="jp-gpudev-body" aria-busy={state.status === 'loading'}>
        {state.status === 'loading' && (
          <p className="jp-gpudev-message" role="status">
            {trans.__('Loading environments…')}
          </p>
        )}
        {state.status === 'error' && state.error && (
          <div className="jp-gpudev-error" role="alert">
            <p className="jp-gpudev-error-title">
              {trans.__('Could not load the environments and dev containers')}
            </p>
            <p className="jp-gpudev-error-message">{state.error.message}</p>
          </div>
        )}
        {state.status === 'ready' && state.environments.length === 0 && (
          <div className="jp-gpudev-empty">
            <p className="jp-gpudev-empty-title">
              {trans.__('No environments')}
            </p>
            <p className="jp-gpudev-hint">
              {trans.__(
                'Add a .devcontainer/devcontainer.json to the folder Jupyter serves, or define environments with c.EnvironmentManager.environments.'
              )}
            </p>
          </div>
        )}
        {state.environments.length > 0 && (
          <ul className="jp-gpudev-rows" aria-label={trans.__('Environments')}>
            {state.environments.map(env => (
              <EnvironmentRow
                key={env.name}
                env={env}
                start={state.starting.get(env.name)}
                hosts={reachable}
                onStart={onStart}
                trans={trans}
              />
            ))}
          </ul>
        )}
        {state.problems.length > 0 && (
          <Problems problems={state.problems} trans={trans} />
        )}
      </div>
    </section>
  );
}

function Problems({
  problems,
  trans
}: {
  problems: readonly IEnvironmentProblem[];
  trans: TranslationBundle;
}): React.JSX.Element {
  return (
    <div className="jp-gpudev-problems">
      <h4 className="jp-gpudev-section-title">
        {trans._n(
          '%1 environment file has a problem',
          '%1 environment files have problems',
          new Set(problems.map(problem => problem.file)).size
        )}
      </h4>
      <ul aria-label={trans.__('Environment problems')}>
        {problems.map((problem, i) => (
          <li
            key={i}
            className={
              'jp-gpudev-problem ' +
              (problem.level === 'error'
                ? 'jp-gpudev-mod-error'
                : 'jp-gpudev-mod-warning')
            }
          >
            <span className="jp-gpudev-problem-level">
              {problem.level === 'error'
                ? trans.__('Error')
                : trans.__('Warning')}
            </span>{' '}
            {!problem.message.includes(problem.file) && (
              <span className="jp-gpudev-problem-file" title={problem.file}>
                {problem.file}
              </span>
            )}
            <div className="jp-gpudev-problem-message">{problem.message}</div>
          </li>
        ))}
      </ul>
    </div>
  );
}
