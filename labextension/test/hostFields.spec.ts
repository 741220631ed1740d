/**
 * The Add host form's checks: a host a user adds logs in with a key of its
 * own, and its workspace is never the user's to choose.
 */
import type { TranslationBundle } from '@jupyterlab/translation';

import {
  EMPTY_FIELDS,
  checkHostFields,
  hostRequest
} from '../src/components/hosts/hostFields';

/** The messages as written (what the null translator does). */
const trans = {
  __: (text: string) => text
} as unknown as TranslationBundle;

describe('checkHostFields', () => {
  it('asks for the key of an ssh:// host', () => {
    const errors = checkHostFields(
      { ...EMPTY_FIELDS, name: 'box', url: 'ssh://me@box' },
      trans
    );
    expect(Object.keys(errors)).toEqual(['identityFile']);
    expect(errors.identityFile).toContain("never the server's");
  });

  it('takes an ssh:// host with its key, and a tcp:// host without one', () => {
    const ssh = { ...EMPTY_FIELDS, name: 'box', url: 'ssh://me@box' };
    expect(
      checkHostFields({ ...ssh, identityFile: '~/.ssh/id_box' }, trans)
    ).toEqual({});
    expect(
      checkHostFields(
        { ...EMPTY_FIELDS, name: 'tls', url: 'tcp://box:2376' },
        trans
      )
    ).toEqual({});
  });

  it('says what is missing without asking the server', () => {
    const errors = checkHostFields(EMPTY_FIELDS, trans);
    expect(errors.name).toBe('Enter a name for the host.');
    expect(errors.url).toBe('Enter the URL of the host.');
  });
});

describe('hostRequest', () => {
  it('sends the name, URL and key files only', () => {
    expect(
      hostRequest({
        name: ' box ',
        url: 'ssh://me@box ',
        identityFile: '~/.ssh/id_box',
        knownHosts: ''
      })
    ).toEqual({
      name: 'box',
      url: 'ssh://me@box',
      identity_file: '~/.ssh/id_box'
    });
  });
});
