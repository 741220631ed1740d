import { Notification } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import { addIcon, refreshIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import type { ContainersModel } from '../../models/containers';
import type { HostsModel } from '../../models/hosts';
import type { ReclaimsModel } from '../../models/reclaims';
import type { UsageModel } from '../../models/usage';
import type { IHostInfo } from '../../types';
import { useModelState } from '../common/hooks';
import { ContainersSection } from '../containers/ContainersSection';
import { EnvironmentsSection } from '../containers/EnvironmentsSection';
import type { OpenContainerView, OpenTerminal } from '../containers/types';
import { AddHostForm } from './AddHostForm';
import { HostList } from './HostList';

interface IViewProps {
  model: HostsModel;
  containers?: ContainersModel | null;
  reclaims?: ReclaimsModel | null;
  /** The GPUs' use by process: shown on the host cards and container rows. */
  usage?: UsageModel | null;
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
  usage,
  openTerminal,
  openView,
  trans
}: IViewProps): React.JSX.Element {
  const state = useModelState(model);
  const usageState = useModelState(usage ?? null);
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
      reclaims?.refresh(),
      usage?.refresh()
    ]).finally(() => {
      setRefreshing(false);
    });
  }, [model, containers, reclaims, usage]);

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
          <HostList
            state={state}
            model={model}
            adding={adding}
            onAddHost={openForm}
            onRemoved={onRemoved}
            usage={usageState?.hosts}
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
            usage={usage}
            openTerminal={openTerminal}
            openView={openView}
            trans={trans}
          />
        </>
      )}
    </div>
  );
}
