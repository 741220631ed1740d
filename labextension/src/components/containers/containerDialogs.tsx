import { Dialog, showDialog } from '@jupyterlab/apputils';
import type { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { toAPIError } from '../../api/errors';
import type { GPUDevAPIError } from '../../api/errors';
import { changedPaths, isUncommittedChanges } from '../../models/containers';
import type { ContainerAction, ContainersModel } from '../../models/containers';
import { ChangedPaths } from '../common/ErrorDetails';

/** The title of the notification of a failed action. */
export function actionFailedTitle(
  action: ContainerAction,
  name: string,
  trans: TranslationBundle
): string {
  switch (action) {
    case 'stop':
      return trans.__('GPU Dev: could not stop %1', name);
    case 'start':
      return trans.__('GPU Dev: could not start %1', name);
    case 'pin':
      return trans.__('GPU Dev: could not pin %1', name);
    case 'unpin':
      return trans.__('GPU Dev: could not unpin %1', name);
    case 'remove':
      return trans.__('GPU Dev: could not remove %1', name);
    case 'terminal':
      return trans.__('GPU Dev: could not open a terminal in %1', name);
    case 'add-port':
      return trans.__('GPU Dev: could not add a web port to %1', name);
    case 'remove-port':
      return trans.__('GPU Dev: could not remove a web port of %1', name);
  }
}

/**
 * Remove a container; if it has uncommitted changes, ask whether to remove
 * it anyway and then force it. Rejects with the error of the last attempt.
 */
export async function removeWithConfirmation(
  model: ContainersModel,
  name: string,
  trans: TranslationBundle
): Promise<void> {
  let refusal: GPUDevAPIError;
  try {
    await model.remove(name);
    return;
  } catch (reason) {
    refusal = toAPIError(reason);
    if (!isUncommittedChanges(refusal)) {
      throw refusal;
    }
  }
  const result = await showDialog({
    title: trans.__('Remove %1 with its changes?', name),
    body: <RemoveAnywayBody error={refusal} trans={trans} />,
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      Dialog.warnButton({ label: trans.__('Remove anyway') })
    ],
    defaultButton: 0
  });
  if (result.button.accept) {
    await model.remove(name, true);
  }
}

function RemoveAnywayBody({
  error,
  trans
}: {
  error: GPUDevAPIError;
  trans: TranslationBundle;
}): React.JSX.Element {
  const paths = changedPaths(error);
  return (
    <div className="jp-gpudev-error-details">
      <p>{error.message}</p>
      <p>
        {trans.__(
          'Removing the container loses these changes for good. Commit them first to keep them.'
        )}
      </p>
      {paths.length > 0 && <ChangedPaths paths={paths} trans={trans} />}
    </div>
  );
}
