import { expect, test } from '@jupyterlab/galata';

import { openPanel, PANEL_ID } from './helpers';

/** The two GPUs printed by tests/fixtures/smi/two-a100 through the fake nvidia-smi. */
const GPU0 = 'GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77';
const GPU1 = 'GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90';
const GPU_NAME = 'NVIDIA A100-SXM4-80GB';

test.describe('GPU Dev panel', () => {
  test('lists the local host with its engine and both GPUs', async ({
    page
  }, testInfo) => {
    const panel = await openPanel(page);

    const host = panel.getByTestId('gpudev-host-local');
    await expect(host).toBeVisible({ timeout: 30000 });
    await expect(host.getByText('reachable', { exact: true })).toBeVisible();
    await expect(host.getByTestId('gpudev-engine-version')).toHaveText(
      /Docker \d+\.\d+/
    );

    const first = host.getByTestId(`gpudev-gpu-${GPU0}`);
    const second = host.getByTestId(`gpudev-gpu-${GPU1}`);
    await expect(first).toBeVisible();
    await expect(second).toBeVisible();
    await expect(first).toContainText(GPU_NAME);
    await expect(second).toContainText(GPU_NAME);
    await expect(first).toContainText('37% util');

    const memory = first.getByRole('progressbar');
    await expect(memory).toHaveAttribute('aria-valuenow', '1234');
    await expect(memory).toHaveAttribute('aria-valuemax', '81920');

    await panel.screenshot({ path: testInfo.outputPath('gpudev-panel.png') });
    await page.screenshot({ path: testInfo.outputPath('gpudev-lab.png') });
  });

  test('can be opened with its command', async ({ page }) => {
    await page.evaluate(async () => {
      // Opened before the saved layout is restored, the panel could be
      // collapsed again by the restorer.
      await window.jupyterapp.restored;
      await window.jupyterapp.commands.execute('gpudev:open-panel');
    });
    const panel = page.locator(`#${PANEL_ID}`);
    await expect(panel).toBeVisible();
    await expect(panel.getByTestId('gpudev-host-local')).toBeVisible({
      timeout: 30000
    });
  });

  test('the refresh button asks the server again', async ({ page }) => {
    const panel = await openPanel(page);
    const host = panel.getByTestId('gpudev-host-local');
    await expect(host).toBeVisible({ timeout: 30000 });

    const answered = page.waitForResponse(
      response =>
        response.url().includes('/gpudev/api/hosts') &&
        response.request().method() === 'GET'
    );
    await panel.getByRole('button', { name: 'Refresh' }).click();
    const response = await answered;
    expect(response.status()).toBe(200);

    await expect(host).toBeVisible();
    await expect(host.getByTestId(`gpudev-gpu-${GPU0}`)).toBeVisible();
  });

  test("an environment's row says what of its devcontainer.json gpudev does not do", async ({
    page
  }) => {
    // Given the `noted` environment (jupyter_server_test_config.py): remoteEnv
    // (not applied) and a misspelt postCreateCommand
    const panel = await openPanel(page);
    const row = panel.getByTestId('gpudev-env-noted');
    await expect(row).toBeVisible({ timeout: 30000 });
    // Then its row lists a note for each, naming the property
    const notes = row
      .getByTestId('gpudev-env-notes-noted')
      .getByRole('listitem');
    await expect(notes).toHaveCount(2);
    await expect(
      notes.filter({ hasText: "'remoteEnv' is ignored" })
    ).toContainText('kernels and terminals get containerEnv');
    await expect(
      notes.filter({
        hasText: "'postCreateComand' is not a devcontainer.json property"
      })
    ).toHaveCount(1);
    // And an environment without notes has no list
    await expect(panel.getByTestId('gpudev-env-notes-web')).toHaveCount(0);
  });
});
