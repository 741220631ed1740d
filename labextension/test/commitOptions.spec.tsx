/**
 * The options of a commit (components/commit/CommitOptions) on a real
 * CommitModel whose API calls are replaced: what the Commit button allows
 * and why not, the push that needs a tag, Enter in the tag, the options
 * sent to the server, and a commit under way.
 */
import * as React from 'react';
import { act } from 'react';

import { CommitOptions } from '../src/components/commit/CommitOptions';
import { useModelState } from '../src/components/common/hooks';
import { CommitModel } from '../src/models';
import type { ICommitChoices } from '../src/models';
import type { IContainerDiff, ICommitResult } from '../src/types';
import { click, press, render, trans, type } from './dom';
import { diff } from './fixtures';

const DEFAULTS: ICommitChoices = {
  write: true,
  verify: false,
  snapshot: '',
  push: false,
  message: ''
};

/** The commit dialog's part around the options: its choices, its Commit. */
function Options({
  model,
  initial,
  onChange
}: {
  model: CommitModel;
  initial: ICommitChoices;
  onChange: (change: Partial<ICommitChoices>) => void;
}): React.JSX.Element {
  const state = useModelState(model);
  const [choices, setChoices] = React.useState(initial);
  return (
    <CommitOptions
      model={model}
      state={state}
      choices={choices}
      onChange={change => {
        onChange(change);
        setChoices(previous => ({ ...previous, ...change }));
      }}
      onCommit={() => {
        model.commit(choices).catch(() => undefined);
      }}
      trans={trans}
    />
  );
}

const models: CommitModel[] = [];
afterEach(() => {
  for (const model of models.splice(0)) {
    model.dispose();
  }
});

/**
 * The options of container `c1` with `initial` choices, its diff read
 * (`read: false`: still loading); the commit never ends unless `commit`
 * says how.
 */
async function renderOptions({
  initial = {},
  theDiff = diff('d1'),
  read = true,
  commit
}: {
  initial?: Partial<ICommitChoices>;
  theDiff?: IContainerDiff;
  read?: boolean;
  commit?: () => Promise<ICommitResult>;
} = {}) {
  const fetchDiff = jest.fn(() => Promise.resolve(theDiff));
  type Commit = CommitModel.IAPI['commitContainer'];
  const commitContainer = jest.fn<ReturnType<Commit>, Parameters<Commit>>(
    commit ?? (() => new Promise<ICommitResult>(() => undefined))
  );
  const model = new CommitModel({
    name: 'c1',
    debounce: 60_000,
    api: { fetchDiff, commitContainer }
  });
  models.push(model);
  if (read) {
    await model.refresh();
  }
  const onChange = jest.fn();
  const view = render(
    <Options
      model={model}
      initial={{ ...DEFAULTS, ...initial }}
      onChange={onChange}
    />
  );
  return {
    ...view,
    model,
    onChange,
    fetchDiff,
    commitContainer,
    commitButton: view.getAs('gpudev-commit-run', HTMLButtonElement),
    snapshot: view.getAs('gpudev-commit-snapshot', HTMLInputElement),
    push: view.getAs('gpudev-commit-push', HTMLInputElement),
    write: view.getAs('gpudev-commit-write', HTMLInputElement),
    verify: view.getAs('gpudev-commit-verify', HTMLInputElement),
    message: view.getAs('gpudev-commit-message', HTMLTextAreaElement)
  };
}

describe('CommitOptions', () => {
  it('cannot commit before the diff is read', async () => {
    const { commitButton } = await renderOptions({ read: false });
    expect(commitButton.disabled).toBe(true);
  });

  it('commits the diff it shows, writing the Dockerfile', async () => {
    // Given the diff d1 read, and the default choices (write)
    const { commitButton, commitContainer } = await renderOptions();
    expect(commitButton.disabled).toBe(false);
    expect(commitButton.title).toBe('Commit the selected changes');
    // When the user clicks Commit
    click(commitButton);
    // Then the server is asked to write that diff, and nothing else
    expect(commitContainer).toHaveBeenCalledTimes(1);
    expect(commitContainer.mock.calls[0]?.[1]).toEqual({
      write: true,
      verify: false,
      exclude: [],
      expect: 'd1'
    });
  });

  it('sends the choices the user made: verify, snapshot, push, message', async () => {
    // Given the diff read
    const {
      snapshot,
      push,
      write,
      verify,
      message,
      commitButton,
      commitContainer,
      onChange
    } = await renderOptions();
    // When the user verifies instead of writing, tags a snapshot, pushes it
    // and writes a message
    click(write);
    click(verify);
    type(snapshot, ' 127.0.0.1:5000/team/env:v2 ');
    click(push);
    type(message, 'curl for the notebooks');
    // Then each change was reported as it was made
    expect(onChange.mock.calls).toEqual([
      [{ write: false }],
      [{ verify: true }],
      [{ snapshot: ' 127.0.0.1:5000/team/env:v2 ' }],
      [{ push: true }],
      [{ message: 'curl for the notebooks' }]
    ]);
    // And the commit sends them, the tag trimmed
    click(commitButton);
    expect(commitContainer.mock.calls[0]?.[1]).toEqual({
      write: false,
      verify: true,
      exclude: [],
      expect: 'd1',
      snapshot: '127.0.0.1:5000/team/env:v2',
      push: true,
      message: 'curl for the notebooks'
    });
  });

  it('offers the push only with a snapshot tag', async () => {
    // Given no tag
    const { push, snapshot } = await renderOptions();
    // Then the push cannot be checked
    expect(push.disabled).toBe(true);
    // When a tag is typed, it can; a tag of spaces is none
    type(snapshot, 'registry/env:v1');
    expect(push.disabled).toBe(false);
    type(snapshot, '   ');
    expect(push.disabled).toBe(true);
  });

  it('refuses a push without a tag, saying so', async () => {
    // Given a dialog opened to push, without a tag yet
    const { commitButton } = await renderOptions({ initial: { push: true } });
    // Then Commit is disabled and says what is missing
    expect(commitButton.disabled).toBe(true);
    expect(commitButton.title).toBe('A push needs a snapshot tag');
  });

  it('refuses an empty diff without a snapshot, saying so', async () => {
    // Given a container without changes to write
    const { commitButton, snapshot } = await renderOptions({
      theDiff: diff('d0', { empty: true, diff: '', items: [] })
    });
    // Then there is nothing to commit
    expect(commitButton.disabled).toBe(true);
    expect(commitButton.title).toBe(
      'Nothing to write: select a change, or give a snapshot tag'
    );
    // Until a snapshot tag is given
    type(snapshot, 'registry/env:v1');
    expect(commitButton.disabled).toBe(false);
  });

  it('refuses a commit that does nothing, saying so', async () => {
    // Given the diff read
    const { commitButton, write } = await renderOptions();
    // When the user unchecks Write (Verify and the tag being off)
    click(write);
    // Then Commit asks what to do
    expect(commitButton.disabled).toBe(true);
    expect(commitButton.title).toBe(
      'Choose what the commit does: write, verify or snapshot'
    );
  });

  it('waits for the diff of a new selection', async () => {
    // Given the diff read
    const { commitButton, model } = await renderOptions();
    // When a change is left out (its diff not read yet)
    act(() => {
      model.setIncluded('apt:curl', false);
    });
    // Then Commit waits for it
    expect(commitButton.disabled).toBe(true);
    expect(commitButton.title).toBe(
      'Wait for the diff of the selected changes'
    );
  });

  it('does not commit on Enter in the snapshot tag', async () => {
    // Given a tag typed
    const { snapshot, commitContainer } = await renderOptions();
    type(snapshot, 'registry/env:v1');
    // When the user presses Enter in it
    const prevented = press(snapshot, 'Enter');
    // Then the form is not submitted: nothing is committed, or pushed
    expect(prevented).toBe(true);
    expect(commitContainer).not.toHaveBeenCalled();
  });

  it('locks the options while the commit runs', async () => {
    // Given a commit under way
    const { commitButton, container } = await renderOptions();
    click(commitButton);
    // Then Commit reads Committing…, busy and disabled, and so are the options
    expect(commitButton.textContent).toBe('Committing…');
    expect(commitButton.getAttribute('aria-busy')).toBe('true');
    expect(commitButton.disabled).toBe(true);
    expect(container.querySelector('fieldset')?.disabled).toBe(true);
  });

  it('can commit again once the commit ended', async () => {
    // Given a commit that succeeds
    let finish: (result: ICommitResult) => void = () => undefined;
    const { commitButton, fetchDiff } = await renderOptions({
      commit: () =>
        new Promise<ICommitResult>(resolve => {
          finish = resolve;
        })
    });
    click(commitButton);
    // When it ends (and the diff is read again)
    await act(async () => {
      finish({
        ...diff('d1'),
        written: '/workspace/.devcontainer/Dockerfile',
        verify: null,
        snapshot: null
      });
      await Promise.resolve();
    });
    // Then the options are back
    expect(fetchDiff).toHaveBeenCalledTimes(2);
    expect(commitButton.textContent).toBe('Commit');
    expect(commitButton.disabled).toBe(false);
  });
});
