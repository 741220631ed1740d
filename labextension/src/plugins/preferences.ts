/** The settings of the main plugin (schema/plugin.json), read. */
import type { ISettingRegistry } from '@jupyterlab/settingregistry';

import type { ICommitDefaults } from '../components/commit/CommitView';
import type { OpenKind } from '../components/containers/types';
import { DEFAULT_INTERVAL_MS, SettingKeys } from '../constants';

/** The settings the commit dialog reads when it opens. */
export interface IPreferences {
  /** Tick "Verify" in a new commit dialog. */
  commitVerify: boolean;
  /** The registry and namespace of snapshot tags, e.g. `127.0.0.1:5000/team`. */
  snapshotRepository: string;
}

export const DEFAULT_PREFERENCES: IPreferences = {
  commitVerify: false,
  snapshotRepository: ''
};

export function readPreferences(
  settings: ISettingRegistry.ISettings
): IPreferences {
  const verify = settings.get(SettingKeys.commitVerify).composite;
  const repository = settings.get(SettingKeys.snapshotRepository).composite;
  return {
    commitVerify: verify === true,
    snapshotRepository:
      typeof repository === 'string'
        ? repository.trim().replace(/\/+$/, '')
        : ''
  };
}

/**
 * What a commit dialog starts with: Push opens it ready to push a snapshot
 * tagged `REPOSITORY/ENVIRONMENT:YYYYMMDD-HHMM` when a repository is set.
 */
export function commitDefaults(
  kind: OpenKind,
  preferences: IPreferences,
  environment: string,
  now: Date = new Date()
): ICommitDefaults {
  if (kind !== 'push') {
    return { write: true, verify: preferences.commitVerify };
  }
  const pad = (n: number): string => String(n).padStart(2, '0');
  const stamp =
    `${now.getFullYear()}${pad(now.getMonth() + 1)}${pad(now.getDate())}` +
    `-${pad(now.getHours())}${pad(now.getMinutes())}`;
  const repository = preferences.snapshotRepository;
  const name =
    environment
      .toLowerCase()
      .replace(/[^a-z0-9._-]+/g, '-')
      .replace(/^[^a-z0-9]+/, '') || 'env';
  return {
    write: false,
    verify: false,
    snapshot: repository ? `${repository}/${name}:${stamp}` : '',
    push: true
  };
}

/** The `refreshInterval` setting in seconds, falling back to the default. */
export function readIntervalSeconds(
  settings: ISettingRegistry.ISettings
): number {
  const value = settings.get(SettingKeys.refreshInterval).composite;
  return typeof value === 'number' && Number.isFinite(value) && value >= 1
    ? value
    : DEFAULT_INTERVAL_MS / 1000;
}
