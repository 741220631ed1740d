/**
 * The changes of a dev container and their commit:
 * `/gpudev/api/containers/NAME/diff` and `.../commit`.
 */
import type { ServerConnection } from '@jupyterlab/services';

import type {
  IChangeItem,
  ICommitProgress,
  ICommitRequest,
  ICommitResult,
  IContainerDiff
} from '../types';
import { finiteOrNull, isRecord, stringArray } from './json';
import { requestShaped } from './request';
import { requestStreamed } from './sse';

function isChangeItem(value: unknown): value is IChangeItem {
  return (
    isRecord(value) &&
    typeof value.id === 'string' &&
    value.id !== '' &&
    typeof value.kind === 'string' &&
    typeof value.label === 'string' &&
    typeof value.detail === 'string'
  );
}

/** A diff with every field the dialog reads, or `null` for another shape. */
export function parseDiff(value: unknown): IContainerDiff | null {
  if (
    !isRecord(value) ||
    typeof value.diff !== 'string' ||
    typeof value.digest !== 'string'
  ) {
    return null;
  }
  return {
    dockerfile: typeof value.dockerfile === 'string' ? value.dockerfile : '',
    created: value.created === true,
    diff: value.diff,
    files: stringArray(value.files),
    reported: stringArray(value.reported),
    digest: value.digest,
    empty: value.empty === true || value.diff === '',
    items: Array.isArray(value.items) ? value.items.filter(isChangeItem) : [],
    excluded: stringArray(value.excluded)
  };
}

/** A commit's result with every field the dialog reads, or `null`. */
export function parseCommitResult(value: unknown): ICommitResult | null {
  const diff = parseDiff(value);
  if (!diff || !isRecord(value)) {
    return null;
  }
  const verify = value.verify;
  const snapshot = value.snapshot;
  return {
    ...diff,
    written: typeof value.written === 'string' ? value.written : null,
    verify: isRecord(verify)
      ? {
          image_id: typeof verify.image_id === 'string' ? verify.image_id : '',
          seconds: finiteOrNull(verify.seconds) ?? 0,
          differences: stringArray(verify.differences),
          ok: verify.ok === true
        }
      : null,
    snapshot:
      isRecord(snapshot) && typeof snapshot.reference === 'string'
        ? {
            reference: snapshot.reference,
            image_id:
              typeof snapshot.image_id === 'string' ? snapshot.image_id : '',
            pushed: snapshot.pushed === true,
            digest:
              typeof snapshot.digest === 'string' && snapshot.digest
                ? snapshot.digest
                : null,
            removed_driver_files: stringArray(snapshot.removed_driver_files)
          }
        : null
  };
}

/**
 * `GET /gpudev/api/containers/NAME/diff`: the container's changes as a
 * Dockerfile diff, each change listed in `items`.
 *
 * @param exclude - ids of changes to leave out of the diff.
 */
export async function fetchDiff(
  name: string,
  exclude: readonly string[] = [],
  settings?: ServerConnection.ISettings,
  signal?: AbortSignal
): Promise<IContainerDiff> {
  return requestShaped(
    ['containers', name, 'diff'],
    parseDiff,
    `the diff of "${name}"`,
    { init: { method: 'GET', signal }, settings, query: { exclude } }
  );
}

/** Options of `commitContainer`. */
export interface ICommitOptions {
  /** Called with each `progress` event, in order. */
  onProgress?: (progress: ICommitProgress) => void;
  settings?: ServerConnection.ISettings;
}

/**
 * `POST /gpudev/api/containers/NAME/commit`: commit the container's changes
 * (write, verify, snapshot, push as `request` says), following its progress
 * through the server-sent events of the answer.
 *
 * @throws {GPUDevAPIError} for an `error` event (e.g. 409 `diff_changed`
 *   when the changes moved since the diff `request.expect` names, 409
 *   `verify_failed`), an error status, or a stream that broke.
 */
export async function commitContainer(
  name: string,
  request: ICommitRequest,
  options: ICommitOptions = {}
): Promise<ICommitResult> {
  return requestStreamed(['containers', name, 'commit'], request, {
    what: `committing "${name}"`,
    broken:
      'The commit may still be running on the server: look at the Dockerfile and the registry before committing again.',
    unfinished: `The server ended the progress of the commit of "${name}" without saying whether it was done.`,
    failed: 'The commit failed (the server log has the details).',
    result: parseCommitResult,
    resultName: 'the result of the commit',
    plainName: 'a commit result',
    ...options
  });
}
