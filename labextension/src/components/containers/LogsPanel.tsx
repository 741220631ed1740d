import type { ServerConnection } from '@jupyterlab/services';
import type { TranslationBundle } from '@jupyterlab/translation';
import { ReactWidget } from '@jupyterlab/ui-components';
import type { Message } from '@lumino/messaging';
import * as React from 'react';

import { fetchLogs } from '../../api/containers';
import { toAPIError } from '../../api/errors';
import type { GPUDevAPIError } from '../../api/errors';

/** How often the logs are read again while shown, in milliseconds. */
export const LOGS_INTERVAL_MS = 2000;

/** The longest log kept on screen, in characters (its end is shown). */
export const LOGS_MAX_CHARS = 500_000;

/** How many of the last lines are read each time. */
export const LOGS_TAIL_LINES = 5000;

/**
 * The output of a dev container (`docker logs`), in the main area. While
 * the tab is shown it is read again every two seconds and follows the end
 * (unless the user scrolled up); a hidden tab reads nothing.
 */
export class LogsPanel extends ReactWidget {
  constructor(options: LogsPanel.IOptions) {
    super();
    this.name = options.name;
    this._trans = options.trans;
    this._read =
      options.fetchLogs ??
      (name => fetchLogs(name, options.serverSettings, LOGS_TAIL_LINES));
    this.id = `gpudev-logs-${options.name}`;
    this.addClass('jp-gpudev-logs-panel');
    this.title.label = options.trans.__('Logs of %1', options.name);
    this.title.closable = true;
  }

  /** The dev container whose logs are shown. */
  readonly name: string;

  /** Read the logs now (unless a read is under way). */
  async refresh(): Promise<void> {
    if (this._reading) {
      return;
    }
    this._reading = true;
    try {
      const text = await this._read(this.name);
      this._text =
        text.length > LOGS_MAX_CHARS ? text.slice(-LOGS_MAX_CHARS) : text;
      this._error = null;
    } catch (reason) {
      this._error = toAPIError(reason);
    } finally {
      this._reading = false;
    }
    if (!this.isDisposed) {
      this.update();
    }
  }

  override dispose(): void {
    window.clearInterval(this._timer);
    super.dispose();
  }

  protected override onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.refresh();
    window.clearInterval(this._timer);
    this._timer = window.setInterval(() => {
      void this.refresh();
    }, LOGS_INTERVAL_MS);
  }

  protected override onBeforeHide(msg: Message): void {
    super.onBeforeHide(msg);
    window.clearInterval(this._timer);
  }

  protected override onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this.isVisible) {
      this.onAfterShow(msg);
    }
  }

  protected override onBeforeDetach(msg: Message): void {
    window.clearInterval(this._timer);
    super.onBeforeDetach(msg);
  }

  protected render(): React.JSX.Element {
    return (
      <LogsView
        name={this.name}
        text={this._text}
        error={this._error}
        trans={this._trans}
      />
    );
  }

  private readonly _trans: TranslationBundle;
  private readonly _read: (name: string) => Promise<string>;
  private _text: string | null = null;
  private _error: GPUDevAPIError | null = null;
  private _timer = 0;
  private _reading = false;
}

export namespace LogsPanel {
  export interface IOptions {
    name: string;
    trans: TranslationBundle;
    serverSettings?: ServerConnection.ISettings;
    /** Replaces the API call, for tests. */
    fetchLogs?: (name: string) => Promise<string>;
  }
}

function LogsView({
  name,
  text,
  error,
  trans
}: {
  name: string;
  text: string | null;
  error: GPUDevAPIError | null;
  trans: TranslationBundle;
}): React.JSX.Element {
  const ref = React.useRef<HTMLPreElement>(null);
  // Follow the end unless the user scrolled away from it.
  const following = React.useRef(true);
  React.useLayoutEffect(() => {
    const pre = ref.current;
    if (pre && following.current) {
      pre.scrollTop = pre.scrollHeight;
    }
  }, [text]);
  return (
    <div className="jp-gpudev-logs" data-testid={`gpudev-logs-${name}`}>
      {error && (
        <div className="jp-gpudev-error" role="alert">
          <p className="jp-gpudev-error-title">
            {trans.__('Could not read the logs of %1', name)}
          </p>
          <p className="jp-gpudev-error-message">{error.message}</p>
        </div>
      )}
      {text === null && !error && (
        <p className="jp-gpudev-message" role="status">
          {trans.__('Reading the logs…')}
        </p>
      )}
      {text !== null && (
        <pre
          ref={ref}
          className="jp-gpudev-log jp-gpudev-logs-text"
          tabIndex={0}
          aria-label={trans.__('Logs of %1', name)}
          onScroll={event => {
            const pre = event.currentTarget;
            following.current =
              pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
          }}
        >
          {text || trans.__('(no output yet)')}
        </pre>
      )}
    </div>
  );
}
