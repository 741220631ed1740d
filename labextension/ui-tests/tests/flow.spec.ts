import { expect, test } from '@jupyterlab/galata';
import type { APIRequestContext } from '@playwright/test';

import { containersOf, openPanel, shot } from './helpers';

/**
 * The whole flow on the local engine, as a user does it: start an
 * environment from the panel, open a notebook on its kernel from the
 * launcher, print the container's hostname, shut the kernel down and see the
 * container stop and its GPU lease freed (fake two-A100 inventory), then
 * install a package in the container's terminal and see it in the commit
 * dialog's diff, leave it out and in again, and commit.
 *
 * The `flow` environment (jupyter_server_test_config.py) leases one GPU and
 * runs the kernel image; apt reaches the host's Debian mirror.
 */
const ENV = 'flow';

interface IListedContainer {
  name: string;
  owner: string;
  environment: string;
  state: string;
  gpu_uuids: string[];
}

interface IListedHost {
  name: string;
  leases?: { container: string; gpu_uuids: string[] }[];
}

interface IListedDiff {
  diff: string;
  items: { id: string }[];
}

/** Names of the containers the test made, removed after it. */
const made = new Set<string>();

/** The GPU leases every host lists, through the API. */
async function leases(
  request: APIRequestContext
): Promise<{ container: string; gpu_uuids: string[] }[]> {
  const listed = await request.get('/gpudev/api/hosts');
  const body = (await listed.json()) as { hosts: IListedHost[] };
  return body.hosts.flatMap(host => host.leases ?? []);
}

/** The ids of the changes the diff of `name` lists, through the API. */
async function changeIds(
  request: APIRequestContext,
  name: string
): Promise<string[]> {
  const got = await request.get(
    `/gpudev/api/containers/${encodeURIComponent(name)}/diff`
  );
  if (!got.ok()) {
    return [];
  }
  return ((await got.json()) as IListedDiff).items.map(item => item.id);
}

test.describe('GPU Dev: the whole flow', () => {
  // Galata's fixtures mock GET /api/terminals (only terminals the page made
  // through /api/terminals) and /api/kernels*: the container's terminal and
  // the toolbar's kernel lookup need the server's real answers.
  test.use({ terminals: null, kernels: null });
  test.afterEach(async ({ page }) => {
    const request = page.request;
    for (const name of made) {
      await request.delete(
        `/gpudev/api/containers/${encodeURIComponent(name)}?force=1`
      );
    }
    made.clear();
  });

  test('start, notebook, hostname, release, install, commit', async ({
    page
  }, testInfo) => {
    test.setTimeout(360_000);
    // The API as the page's (anonymous) user, who owns what it starts.
    const request = page.request;
    const before = new Set(
      (await containersOf<IListedContainer>(request, ENV)).map(c => c.name)
    );

    // Given the panel, when the user starts the flow environment from it
    const panel = await openPanel(page);
    await panel.getByTestId(`gpudev-env-start-${ENV}`).click();

    // Then a container of it runs, holding one GPU
    let container: IListedContainer | undefined;
    await expect
      .poll(
        async () => {
          container = (await containersOf<IListedContainer>(request, ENV)).find(
            c =>
              c.environment === ENV &&
              !before.has(c.name) &&
              c.state === 'running'
          );
          return container?.name ?? '';
        },
        { timeout: 120_000 }
      )
      .not.toBe('');
    const started = container;
    if (!started) {
      throw new Error('no running container of the environment');
    }
    const name = started.name;
    made.add(name);
    expect(started.gpu_uuids).toHaveLength(1);
    const gpu = started.gpu_uuids[0];
    const row = panel.getByTestId(`gpudev-container-${name}`);
    await expect(row).toHaveAttribute('data-state', 'running');
    // And the host's GPU shows who holds it
    await expect(panel.getByTestId(`gpudev-gpu-state-${gpu}`)).toHaveText(
      'held'
    );
    await expect(panel.getByTestId(`gpudev-gpu-holder-${gpu}`)).toContainText(
      name
    );
    await shot(page, testInfo, '01-started');

    // When the user opens a notebook on its kernel from the launcher (the
    // kernel list is refreshed: the shared container's kernel is new)
    await page.evaluate(async () => {
      await window.jupyterapp.serviceManager.kernelspecs.refreshSpecs();
    });
    await page.menu.clickMenuItem('File>New Launcher');
    const card = page
      .locator('.jp-LauncherCard[data-category="Notebook"]:visible')
      .filter({ hasText: name });
    await expect(card).toHaveCount(1);
    // Then the launcher entry has the gpudev icon
    await expect(card.locator('img')).toHaveAttribute('src', /logo-svg/);
    await shot(page, testInfo, '02-launcher');
    await card.click();
    await page.waitForSelector('.jp-NotebookPanel');
    await page.notebook.setCell(
      0,
      'code',
      'import socket; print(socket.gethostname())'
    );
    await page.notebook.runCell(0);
    // Then the cell prints the container's hostname
    await expect
      .poll(async () => (await page.notebook.getCellTextOutput(0))?.join(''), {
        timeout: 90_000
      })
      .toContain(name);
    // And the notebook's toolbar shows the container and its GPU
    const label = page.getByTestId('gpudev-kernel-label');
    await expect(label).toContainText(name, { timeout: 30_000 });
    await expect(label).toContainText('GPU');
    await shot(page, testInfo, '03-hostname');

    // When the user shuts the kernel down
    await page.menu.clickMenuItem('Kernel>Shut Down Kernel');
    // Then the container stops and its GPU lease is freed
    await expect(row).toHaveAttribute('data-state', /exited|created/, {
      timeout: 60_000
    });
    await expect
      .poll(async () => (await leases(request)).some(l => l.container === name))
      .toBe(false);
    await expect(panel.getByTestId(`gpudev-gpu-state-${gpu}`)).toHaveText(
      'free',
      { timeout: 30_000 }
    );
    await expect(panel.getByTestId(`gpudev-gpu-holder-${gpu}`)).toHaveCount(0);
    await shot(page, testInfo, '04-released');

    // When the user starts it again and installs a package in its terminal
    await row.getByTestId(`gpudev-container-start-${name}`).click();
    await expect(row).toHaveAttribute('data-state', 'running', {
      timeout: 60_000
    });
    await row.getByTestId(`gpudev-container-terminal-${name}`).click();
    const terminal = page.locator('.jp-Terminal').last();
    await expect(terminal).toBeVisible();
    await terminal.click();
    // (only where the hostname is the container's: never on the test machine)
    await page.keyboard.type(
      `[ "$(hostname)" = "${name.slice(0, 63)}" ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends cowsay\n`
    );
    await expect
      .poll(async () => changeIds(request, name), {
        timeout: 180_000,
        intervals: [3000]
      })
      .toContain('apt:cowsay');
    await shot(page, testInfo, '05-terminal');

    // Then the panel marks the container as having uncommitted changes,
    // counted as the commit dialog lists them: one package, not its files
    const badge = row.getByTestId(`gpudev-container-uncommitted-${name}`);
    await expect(badge).toHaveText('1 change', { timeout: 60_000 });

    // When the user opens its commit dialog
    await row.getByTestId(`gpudev-container-commit-${name}`).click();
    const dialog = page.getByTestId('gpudev-commit');
    const change = dialog.getByTestId('gpudev-change-apt:cowsay');
    // Then it lists the package, checked, and the diff installs it
    await expect(change).toBeVisible({ timeout: 60_000 });
    await expect(change.getByRole('checkbox')).toBeChecked();
    const diff = dialog.getByTestId('gpudev-commit-diff');
    await expect(diff).toContainText('cowsay=');
    // And the badge names as many changes as the dialog lists
    const listed = await dialog
      .locator('[data-testid^="gpudev-change-"]')
      .count();
    expect(await badge.textContent()).toBe(
      `${listed} change${listed === 1 ? '' : 's'}`
    );
    await shot(page, testInfo, '06-commit-dialog');

    // When the user leaves it out, the diff no longer has it
    // (the only change: nothing would be written then)
    await change.getByRole('checkbox').uncheck();
    await expect(dialog.getByTestId('gpudev-commit-diff-empty')).toBeVisible({
      timeout: 30_000
    });
    await expect(change.getByRole('checkbox')).not.toBeChecked();
    await expect(dialog.getByTestId('gpudev-commit-run')).toBeDisabled();
    // And when they take it back, it has it again
    await change.getByRole('checkbox').check();
    await expect(diff).toContainText('cowsay=', { timeout: 30_000 });

    // When they commit, writing the Dockerfile
    await expect(dialog.getByTestId('gpudev-commit-write')).toBeChecked();
    await dialog.getByTestId('gpudev-commit-run').click();
    // Then the outcome names the Dockerfile written for the environment
    await expect(dialog.getByTestId('gpudev-commit-written')).toContainText(
      `.devcontainer/${ENV}/Dockerfile`,
      { timeout: 120_000 }
    );
    await shot(page, testInfo, '07-committed');
    // And the diff read again is empty: the change is committed
    await dialog.getByTestId('gpudev-commit-refresh').click();
    await expect(dialog.getByTestId('gpudev-commit-empty')).toBeVisible({
      timeout: 60_000
    });
  });
});
