import type { TranslationBundle } from '@jupyterlab/translation';

import type { IAddHostRequest } from '../../types';

/** The fields of the Add host form, as typed. */
export interface IHostFields {
  name: string;
  url: string;
  identityFile: string;
  knownHosts: string;
}

export type FieldErrors = Partial<Record<keyof IHostFields, string>>;

export const EMPTY_FIELDS: IHostFields = {
  name: '',
  url: '',
  identityFile: '',
  knownHosts: ''
};

/** What is wrong with the fields before asking the server, by field. */
export function checkHostFields(
  fields: IHostFields,
  trans: TranslationBundle
): FieldErrors {
  const errors: FieldErrors = {};
  if (!fields.name.trim()) {
    errors.name = trans.__('Enter a name for the host.');
  } else if (/[\s/]/.test(fields.name.trim())) {
    errors.name = trans.__('A name has no spaces or slashes.');
  }
  const url = fields.url.trim();
  if (!url) {
    errors.url = trans.__('Enter the URL of the host.');
  } else if (!/^(ssh|tcp):\/\/[^\s/]+\/?$/.test(url)) {
    errors.url = trans.__(
      'Use ssh://user@host, ssh://user@host:port or tcp://host:port.'
    );
  }
  if (url.startsWith('ssh://') && !fields.identityFile.trim()) {
    errors.identityFile = trans.__(
      "A host you add uses its own SSH key, never the server's: enter the key file."
    );
  }
  return errors;
}

/** The request the form's fields make; empty optional fields are left out. */
export function hostRequest(fields: IHostFields): IAddHostRequest {
  const request: IAddHostRequest = {
    name: fields.name.trim(),
    url: fields.url.trim()
  };
  const identityFile = fields.identityFile.trim();
  const knownHosts = fields.knownHosts.trim();
  if (identityFile) {
    request.identity_file = identityFile;
  }
  if (knownHosts) {
    request.known_hosts = knownHosts;
  }
  return request;
}
