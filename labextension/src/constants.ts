/**
 * The names the extension is known by outside its code: plugin ids,
 * command ids, settings keys, REST paths, DOM ids. Changing one breaks
 * users' settings, shortcuts or the UI tests: they stay as they are.
 */

/** The main plugin's id; also names the settings schema (schema/plugin.json). */
export const PLUGIN_ID = 'jupyter-gpudev:plugin';

/** The id of the notebook toolbar item's plugin. */
export const NOTEBOOK_TOOLBAR_PLUGIN_ID = 'jupyter-gpudev:notebook-toolbar';

/**
 * The id of the plugin rendering outputs of gpudev kernels untrusted when the
 * server says so (plugins/untrustedOutputs.ts).
 */
export const UNTRUSTED_OUTPUTS_PLUGIN_ID = 'jupyter-gpudev:untrusted-outputs';

/**
 * The page config key in which the server says how outputs of gpudev
 * kernels render (jupyter_gpudev/app.py `OUTPUTS_PAGE_CONFIG`).
 */
export const KERNEL_OUTPUTS_PAGE_CONFIG = 'gpudevKernelOutputs';

/** The commands this extension adds. */
export namespace CommandIDs {
  export const openPanel = 'gpudev:open-panel';
  /** Open the commit dialog of the dev container `name`. */
  export const commit = 'gpudev:commit';
  /** Open the logs of the dev container `name`. */
  export const logs = 'gpudev:logs';
}

/** JupyterLab's command opening an existing terminal by `name` (terminal extension). */
export const OPEN_TERMINAL_COMMAND = 'terminal:open';

/** The keys of the settings of `PLUGIN_ID` (schema/plugin.json). */
export namespace SettingKeys {
  /** Seconds between two refreshes of the panel. */
  export const refreshInterval = 'refreshInterval';
  /** Whether notebook toolbars show the kernel's container. */
  export const showKernelToolbar = 'showKernelToolbar';
  /** Tick "Verify" in a new commit dialog. */
  export const commitVerify = 'commitVerify';
  /** The registry and namespace Push fills the snapshot tag with. */
  export const snapshotRepository = 'snapshotRepository';
}

/** Path of the REST API below the server's base URL. */
export const API_PATH = 'gpudev/api';

/** Path of the server's proxy of containers' web ports below the base URL. */
export const PROXY_PATH = 'gpudev/proxy';

/** The id of the panel in the shell (also used by the layout restorer). */
export const PANEL_ID = 'gpudev-panel';

/** The translation domain of this extension. */
export const TRANSLATION_DOMAIN = 'jupyter_gpudev';

/** The name of the item in the notebook toolbars. */
export const TOOLBAR_ITEM_NAME = 'gpudev';

/** Default time between two refreshes of the panel's lists, in milliseconds. */
export const DEFAULT_INTERVAL_MS = 5000;

/** Time between two looks at the pending GPU reclaims, in milliseconds. */
export const RECLAIMS_INTERVAL_MS = 10000;

/**
 * Time between two looks at the GPU use of a notebook's kernel, in
 * milliseconds (while the notebook is shown).
 */
export const KERNEL_USAGE_INTERVAL_MS = 10000;

/** The longest a poll waits between two attempts while failing, in milliseconds. */
export const MAX_INTERVAL_MS = 60000;
