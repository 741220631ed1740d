import type { TranslationBundle } from '@jupyterlab/translation';

import type { ContainersModel } from '../../models/containers';

/** The props of the sections of the panel showing the containers model. */
export interface ISectionProps {
  model: ContainersModel;
  trans: TranslationBundle;
}

/**
 * Open an existing Jupyter terminal, by its name, in the main area (the
 * panel passes the `terminal:open` command of JupyterLab).
 */
export type OpenTerminal = (name: string) => Promise<void>;

/** What the panel opens in the main area for a container. */
export type OpenKind = 'commit' | 'push' | 'logs';

/**
 * Open the commit dialog (`push` opens it ready to push a snapshot) or the
 * logs of a dev container in the main area.
 */
export type OpenContainerView = (name: string, kind: OpenKind) => void;
