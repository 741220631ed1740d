import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel, ServerConnection } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';
import type { ISignal } from '@lumino/signaling';

import { GPUDevAPIError, NETWORK_ERROR } from '../api/errors';
import { fetchHost } from '../api/hosts';
import { fetchKernelInfo } from '../api/kernels';
import type { IHostInfo, IKernelInfo, IKernelUsage } from '../types';
import { gpuIndexesOf } from './hosts';
import type { IHostsState } from './hosts';
import type { IKernelUsageState, KernelUsages } from './kernelUsage';
import { StateModel } from './state';
import type { IStateModel } from './state';

/**
 * The index of each GPU seen so far, by UUID, shared by the items of every
 * notebook: a UUID keeps its index while the host runs, so a host is asked
 * only for GPUs it has not told yet. Given the panel's hosts model (the
 * `IGPUDevModel` token), its hosts are read first, and their changes
 * announced by `changed`.
 */
export class GPUIndexes {
  constructor(options: GPUIndexes.IOptions) {
    const settings = options.settings;
    this._fetchHost = options.fetchHost ?? (name => fetchHost(name, settings));
    const hosts = options.hosts ?? null;
    if (hosts) {
      this._learn(hosts.state.hosts);
      hosts.stateChanged.connect((_, state) => {
        if (this._learn(state.hosts)) {
          this._changed.emit();
        }
      });
    }
  }

  /** Emitted when the hosts model told indexes not known before. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The indexes of `uuids` that are known. */
  known(uuids: readonly string[]): Map<string, number> {
    const found = new Map<string, number>();
    for (const uuid of uuids) {
      const index = this._indexes.get(uuid);
      if (index !== undefined) {
        found.set(uuid, index);
      }
    }
    return found;
  }

  /**
   * Ask `host` for its GPUs (once at a time per host) and remember their
   * indexes. Any failure leaves them unknown: the item then shows short
   * UUIDs.
   */
  async load(host: string): Promise<void> {
    let pending = this._pending.get(host);
    if (!pending) {
      pending = this._fetchHost(host)
        .then(info => {
          this._learn([info]);
        })
        .catch(() => undefined)
        .finally(() => {
          this._pending.delete(host);
        });
      this._pending.set(host, pending);
    }
    return pending;
  }

  /** Remember the indexes of the GPUs of `hosts`; true if one was new. */
  private _learn(hosts: readonly IHostInfo[]): boolean {
    let learnt = false;
    for (const [uuid, index] of gpuIndexesOf(hosts)) {
      if (this._indexes.get(uuid) !== index) {
        this._indexes.set(uuid, index);
        learnt = true;
      }
    }
    return learnt;
  }

  private readonly _fetchHost: (name: string) => Promise<IHostInfo>;
  private readonly _indexes = new Map<string, number>();
  private readonly _pending = new Map<string, Promise<void>>();
  private readonly _changed = new Signal<this, void>(this);
}

export namespace GPUIndexes {
  export interface IOptions {
    /** The server connection. */
    settings: ServerConnection.ISettings;
    /** The panel's hosts, when the main plugin is there. */
    hosts?: IStateModel<IHostsState> | null;
    /** Replaces the API call, for tests. */
    fetchHost?: (name: string) => Promise<IHostInfo>;
  }
}

/** What the toolbar item of one notebook shows. */
export interface IKernelBadgeState {
  /** The notebook's gpudev kernel; `null` hides the item. */
  readonly info: IKernelInfo | null;
  /** The index of each GPU of `info` that is known, by UUID. */
  readonly indexes: ReadonlyMap<string, number>;
  /** Whether a release is under way. */
  readonly releasing: boolean;
  /**
   * What the kernel holds on its GPUs, while the item is visible and the
   * kernel has GPUs; `null` when not known (yet).
   */
  readonly usage: IKernelUsage | null;
}

/**
 * The state of the toolbar item of one notebook. It asks the server about
 * the notebook's kernel when the kernel changes, once the kernel is ready
 * after a start or restart, and when it dies; never on a timer. The GPU
 * use of a kernel with GPUs is polled (through the shared `usages`) only
 * while the item is `visible`.
 */
export class KernelBadgeModel extends StateModel<IKernelBadgeState> {
  constructor(options: KernelBadgeModel.IOptions) {
    super({ info: null, indexes: new Map(), releasing: false, usage: null });
    this._fetchKernelInfo =
      options.fetchKernelInfo ??
      (kernelId => fetchKernelInfo(kernelId, options.settings));
    this._sessionContext = options.sessionContext;
    this._indexes = options.indexes;
    this._enabled = options.enabled ?? true;
    this._usages = options.usages ?? null;
    this._sessionContext.kernelChanged.connect(this._onKernelChanged);
    this._sessionContext.statusChanged.connect(this._onStatusChanged);
    this._indexes.changed.connect(this._onIndexesChanged);
    if (this._sessionContext.session?.kernel) {
      this._afterStart = true;
      void this.refresh();
    }
  }

  /** Whether the item is shown at all (the `showKernelToolbar` setting). */
  get enabled(): boolean {
    return this._enabled;
  }

  set enabled(value: boolean) {
    if (value === this._enabled) {
      return;
    }
    this._enabled = value;
    void this.refresh();
  }

  /**
   * Whether the item is shown on screen (its notebook is the visible tab).
   * The kernel's GPU use is polled only while it is.
   */
  get visible(): boolean {
    return this._visible;
  }

  set visible(value: boolean) {
    if (value === this._visible) {
      return;
    }
    this._visible = value;
    this._syncUsage();
  }

  /**
   * Ask the server about the notebook's current kernel. A kernel that is
   * not a gpudev one (404), no kernel, or a server out of reach hides the
   * item, without a notification.
   */
  async refresh(): Promise<void> {
    const generation = ++this._generation;
    const kernelId = this._sessionContext.session?.kernel?.id;
    if (!this._enabled || !kernelId) {
      this.patch({ info: null, indexes: new Map() });
      this._syncUsage();
      return;
    }
    let info: IKernelInfo;
    try {
      info = await this._fetchKernelInfo(kernelId);
    } catch (reason) {
      if (!this._isCurrent(generation)) {
        return;
      }
      const quiet =
        reason instanceof GPUDevAPIError &&
        (reason.status === 404 || reason.code === NETWORK_ERROR);
      if (!quiet) {
        console.warn(
          `jupyter-gpudev: could not tell whether kernel ${kernelId} is a gpudev kernel.`,
          reason
        );
      }
      this.patch({ info: null, indexes: new Map() });
      this._syncUsage();
      return;
    }
    if (!this._isCurrent(generation)) {
      return;
    }
    const indexes = this._indexes.known(info.gpu_uuids);
    this.patch({ info, indexes });
    this._syncUsage();
    if (indexes.size === info.gpu_uuids.length || !info.host) {
      return;
    }
    await this._indexes.load(info.host);
    if (!this._isCurrent(generation)) {
      return;
    }
    this.patch({ indexes: this._indexes.known(info.gpu_uuids) });
  }

  /**
   * Shut the notebook's kernel down (its session, as the Kernel menu's "Shut
   * Down Kernel" does): the server stops its dev container, which frees its
   * GPUs.
   *
   * @throws whatever the shutdown threw; the item stays shown then.
   */
  async release(): Promise<void> {
    if (this.state.releasing) {
      return;
    }
    this.patch({ releasing: true });
    try {
      await this._sessionContext.shutdown();
    } finally {
      if (!this.isDisposed) {
        this.patch({ releasing: false });
        void this.refresh();
      }
    }
  }

  protected override onDispose(): void {
    this._generation++;
    this._unwatch();
    this._sessionContext.kernelChanged.disconnect(this._onKernelChanged);
    this._sessionContext.statusChanged.disconnect(this._onStatusChanged);
    this._indexes.changed.disconnect(this._onIndexesChanged);
  }

  /**
   * Watch the GPU use of the kernel shown while it has GPUs, poll it while
   * the item is visible, and stop watching any other kernel.
   */
  private _syncUsage(): void {
    const info = this.state.info;
    const wanted =
      this._usages && !this._usages.isDisposed && info && info.gpu_uuids.length
        ? info.kernel_id
        : null;
    if (this._watch && this._watch.kernelId !== wanted) {
      this._unwatch();
      this.patch({ usage: null });
    }
    if (wanted === null || !this._usages) {
      return;
    }
    if (!this._watch) {
      this._watch = this._usages.watch(wanted);
      this._watch.model.stateChanged.connect(this._onUsage);
      this._onUsage(this._watch.model, this._watch.model.state);
    }
    this._watch.visible = this._visible;
  }

  private _unwatch(): void {
    if (this._watch) {
      this._watch.model.stateChanged.disconnect(this._onUsage);
      this._watch.dispose();
      this._watch = null;
    }
  }

  private readonly _onUsage = (_: unknown, state: IKernelUsageState): void => {
    if (this.state.usage !== state.usage) {
      this.patch({ usage: state.usage });
    }
  };

  /** Whether an answer to refresh `generation` is still wanted. */
  private _isCurrent(generation: number): boolean {
    return generation === this._generation && !this.isDisposed;
  }

  /** The hosts model told indexes: show those of the kernel's GPUs. */
  private readonly _onIndexesChanged = (): void => {
    const info = this.state.info;
    if (info && info.gpu_uuids.length > 0) {
      this.patch({ indexes: this._indexes.known(info.gpu_uuids) });
    }
  };

  private readonly _onKernelChanged = (): void => {
    this._afterStart = true;
    this._afterRestart = false;
    void this.refresh();
  };

  private readonly _onStatusChanged = (
    _: ISessionContext,
    status: Kernel.Status
  ): void => {
    switch (status) {
      case 'restarting':
      case 'autorestarting':
        this._afterRestart = true;
        break;
      case 'dead':
        // A dead kernel may have left its container: the server says.
        void this.refresh();
        break;
      case 'idle': {
        // Ready: after a restart the kernel may run elsewhere; after a start,
        // ask again if the first answer did not find it.
        const current = this._sessionContext.session?.kernel?.id;
        const missed =
          this._afterStart && this.state.info?.kernel_id !== current;
        if (this._afterRestart || missed) {
          void this.refresh();
        }
        this._afterStart = false;
        this._afterRestart = false;
        break;
      }
      default:
        break;
    }
  };

  private readonly _sessionContext: ISessionContext;
  private readonly _fetchKernelInfo: (kernelId: string) => Promise<IKernelInfo>;
  private readonly _indexes: GPUIndexes;
  private readonly _usages: KernelUsages | null;
  private _watch: KernelUsages.IWatch | null = null;
  private _visible = false;
  private _enabled: boolean;
  /** Bumped by each refresh: an answer to an older one is dropped. */
  private _generation = 0;
  private _afterStart = false;
  private _afterRestart = false;
}

export namespace KernelBadgeModel {
  export interface IOptions {
    /** The notebook's session context. */
    sessionContext: ISessionContext;
    /** The GPU indexes shared by every notebook's item. */
    indexes: GPUIndexes;
    /** The server connection. */
    settings: ServerConnection.ISettings;
    /** Whether the item is shown at all (default true). */
    enabled?: boolean;
    /** The GPU use of the kernels, shared by every notebook's item. */
    usages?: KernelUsages | null;
    /** Replaces the API call, for tests. */
    fetchKernelInfo?: (kernelId: string) => Promise<IKernelInfo>;
  }
}
