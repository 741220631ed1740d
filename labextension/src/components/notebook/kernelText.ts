import type { TranslationBundle } from '@jupyterlab/translation';

import type { IKernelInfo } from '../../types';

/** Characters of a GPU UUID shown when its index is not known. */
const SHORT_UUID_LENGTH = 8;

/**
 * A GPU as short as it can be told apart: its index when known, else the
 * first characters of its UUID (`GPU-5d5ba0d6-...` -> `5d5ba0d6`; a MIG
 * instance keeps its `MIG-` prefix).
 */
export function gpuShortName(
  uuid: string,
  indexes: ReadonlyMap<string, number>
): string {
  const index = indexes.get(uuid);
  if (index !== undefined) {
    return String(index);
  }
  const match = /^(GPU-|MIG-)?(.*)$/.exec(uuid);
  const prefix = match?.[1] ?? '';
  const rest = (match?.[2] ?? uuid).slice(0, SHORT_UUID_LENGTH);
  return prefix === 'MIG-' ? `MIG-${rest}` : rest;
}

/** The GPUs of the kernel in a few characters: `GPU 0, 1` or `CPU only`. */
export function gpusText(
  info: IKernelInfo,
  indexes: ReadonlyMap<string, number>,
  trans: TranslationBundle
): string {
  if (info.gpu_uuids.length === 0) {
    return trans.__('CPU only');
  }
  return trans.__(
    'GPU %1',
    info.gpu_uuids.map(uuid => gpuShortName(uuid, indexes)).join(', ')
  );
}

/** The tooltip of the item: container, host, environment, full GPU UUIDs. */
export function kernelTooltip(
  info: IKernelInfo,
  indexes: ReadonlyMap<string, number>,
  trans: TranslationBundle
): string {
  const lines = [
    info.state
      ? trans.__(
          'GPU Dev kernel in dev container %1 (%2)',
          info.container,
          info.state
        )
      : trans.__('GPU Dev kernel in dev container %1', info.container),
    trans.__('Host: %1', info.host || trans.__('unknown')),
    trans.__('Environment: %1', info.environment || trans.__('unknown'))
  ];
  if (info.gpu_uuids.length === 0) {
    lines.push(trans.__('GPUs: none (CPU only)'));
  } else {
    lines.push(trans._n('GPU:', 'GPUs:', info.gpu_uuids.length));
    for (const uuid of info.gpu_uuids) {
      const index = indexes.get(uuid);
      lines.push(
        index === undefined
          ? `  ${uuid}`
          : `  ${trans.__('GPU %1', index)}: ${uuid}`
      );
    }
  }
  if (info.shared) {
    lines.push(trans.__('Shared: other kernels can run in this container too'));
  }
  return lines.join('\n');
}

/** The label of the release button. */
export function releaseLabel(
  info: IKernelInfo,
  trans: TranslationBundle
): string {
  return info.gpu_uuids.length > 0
    ? trans.__('Release GPU')
    : trans.__('Shut down kernel');
}
