import { expect, test } from '@jupyterlab/galata';
import type { IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { APIRequestContext, Page } from '@playwright/test';

import {
  gpuKernelName,
  keepBusy,
  removeLeftovers as removeAll,
  sessionKernel
} from './helpers';

/**
 * The notebook toolbar item of a gpudev kernel. A kernel of the `gpu`
 * environment (.devcontainer/gpu/devcontainer.json, written by
 * jupyter_server_test_config.py) leases one of the two fake A100 GPUs and
 * runs in a dev container of its own on the real Docker engine.
 */

/** The two GPUs printed by tests/fixtures/smi/two-a100 through the fake nvidia-smi. */
const GPU_INDEXES: Record<string, number> = {
  'GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77': 0,
  'GPU-8f2a9c41-7b3e-4c55-9d0a-2e6f1b7c3d90': 1
};

/** Starting a kernel makes its container first. */
const KERNEL_START_TIMEOUT = 120000;

/** Ids of the kernels the tests started, shut down after each. */
const startedKernels = new Set<string>();

/** Names of the containers the tests made, removed again after each. */
const madeContainers = new Set<string>();

interface IKernelInfo {
  kernel_id: string;
  container: string;
  host: string;
  environment: string;
  gpu_uuids: string[];
  shared: boolean;
  state: string;
}

interface IListedContainer {
  name: string;
  state: string;
}

interface IListedHost {
  name: string;
  leases?: { container: string; gpu_uuids: string[] }[];
}

/** The execution state of kernel `id` (`gone` once it ended). */
async function executionState(
  request: APIRequestContext,
  id: string
): Promise<string> {
  const got = await request.get(`/api/kernels/${encodeURIComponent(id)}`);
  if (got.status() === 404) {
    return 'gone';
  }
  expect(got.ok()).toBe(true);
  return ((await got.json()) as { execution_state: string }).execution_state;
}

/** The ids of the running kernels, through the API. */
async function kernelIds(request: APIRequestContext): Promise<string[]> {
  const listed = await request.get('/api/kernels');
  expect(listed.ok()).toBe(true);
  return ((await listed.json()) as { id: string }[]).map(kernel => kernel.id);
}

/** The state of dev container `name` (`absent` once removed). */
async function containerState(
  request: APIRequestContext,
  name: string
): Promise<string> {
  const listed = await request.get('/gpudev/api/containers?all=1');
  expect(listed.ok()).toBe(true);
  const body = (await listed.json()) as { containers: IListedContainer[] };
  return body.containers.find(c => c.name === name)?.state ?? 'absent';
}

/** The containers holding a GPU lease on any host, through the API. */
async function leasedContainers(request: APIRequestContext): Promise<string[]> {
  const listed = await request.get('/gpudev/api/hosts');
  expect(listed.ok()).toBe(true);
  const body = (await listed.json()) as { hosts: IListedHost[] };
  return body.hosts.flatMap(host =>
    (host.leases ?? []).map(lease => lease.container)
  );
}

/** The gpudev item in the toolbar of the notebook shown. */
function toolbarItem(page: IJupyterLabPageFixture | Page) {
  return page.locator(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-NotebookPanel-toolbar .jp-gpudev-kernel-item'
  );
}

/** The answer to the item's question about a kernel. */
function kernelInfoAnswer(page: Page) {
  return page.waitForResponse(
    response =>
      /\/gpudev\/api\/kernels\/[0-9a-f-]+$/.test(
        new URL(response.url()).pathname
      ) && response.request().method() === 'GET'
  );
}

/** Shut the test's kernels down and remove its containers. */
async function removeLeftovers(request: APIRequestContext): Promise<void> {
  await removeAll(request, startedKernels, madeContainers);
}

test.describe('Notebook toolbar item of a gpudev kernel', () => {
  // Starting a GPU kernel makes a container.
  test.setTimeout(240000);
  // Wide enough for the whole toolbar: a narrow one moves its last items
  // into its overflow menu.
  test.use({ viewport: { width: 1440, height: 900 } });
  // Galata's kernels fixture proxies every URL that contains /api/kernels,
  // /gpudev/api/kernels/ID included, and answers 404 for kernels it did not
  // see start. The kernels are shut down here through the API.
  test.use({ kernels: null });

  test.afterEach(async ({ page }) => {
    await removeLeftovers(page.request);
  });

  test('shows the container and GPU of the kernel, and releases it', async ({
    page
  }, testInfo) => {
    // Given a notebook whose kernel is a new dev container of `gpu`
    const kernelName = await gpuKernelName(page.request);
    expect(
      await page.notebook.createNew(undefined, { kernel: kernelName })
    ).toBeTruthy();
    await expect
      .poll(async () => (await sessionKernel(page.request, kernelName))?.id, {
        timeout: KERNEL_START_TIMEOUT
      })
      .toBeTruthy();
    const kernelId = (await sessionKernel(page.request, kernelName))?.id ?? '';
    startedKernels.add(kernelId);
    await expect
      .poll(
        async () =>
          (
            await page.request.get(
              `/gpudev/api/kernels/${encodeURIComponent(kernelId)}`
            )
          ).status(),
        { timeout: KERNEL_START_TIMEOUT }
      )
      .toBe(200);
    const info = (await (
      await page.request.get(`/gpudev/api/kernels/${kernelId}`)
    ).json()) as IKernelInfo;
    madeContainers.add(info.container);
    expect(info).toMatchObject({
      kernel_id: kernelId,
      host: 'local',
      environment: 'gpu',
      shared: false,
      state: 'running'
    });
    expect(info.gpu_uuids).toHaveLength(1);
    const uuid = info.gpu_uuids[0] ?? '';
    const index = GPU_INDEXES[uuid];
    expect(index).toBeDefined();

    // Then its toolbar shows the container and the GPU's index
    const item = toolbarItem(page);
    await expect(item).toBeVisible({ timeout: KERNEL_START_TIMEOUT });
    await keepBusy(page);
    await expect
      .poll(() => executionState(page.request, kernelId), { timeout: 15000 })
      .toBe('busy');
    const label = item.getByTestId('gpudev-kernel-label');
    await expect(label).toContainText(info.container);
    await expect(label).toContainText(`GPU ${index}`);
    // And its tooltip the host, the environment and the GPU's full UUID
    const tooltip = await label.getAttribute('title');
    expect(tooltip).toContain(`dev container ${info.container}`);
    expect(tooltip).toContain('Host: local');
    expect(tooltip).toContain('Environment: gpu');
    expect(tooltip).toContain(`GPU ${index}: ${uuid}`);
    // And the release button is a real, named button
    const release = item.getByTestId('gpudev-kernel-release');
    await expect(release).toHaveText('Release GPU');
    await expect(release).toHaveAccessibleName(
      `Release GPU: shut the kernel down and free the GPUs of ${info.container}`
    );
    await expect(release).toBeEnabled();
    // And the long container name is cut with an ellipsis
    const name = label.locator('.jp-gpudev-kernel-name');
    await expect(name).toHaveCSS('text-overflow', 'ellipsis');
    expect(
      await name.evaluate(element => element.scrollWidth > element.clientWidth)
    ).toBe(true);
    const toolbar = page.locator(
      '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-NotebookPanel-toolbar'
    );
    await page.screenshot({
      path: testInfo.outputPath('gpudev-notebook-toolbar-lab.png')
    });
    await toolbar.screenshot({
      path: testInfo.outputPath('gpudev-notebook-toolbar.png')
    });
    // And it reads in the dark theme too
    await page.theme.setDarkTheme();
    await toolbar.screenshot({
      path: testInfo.outputPath('gpudev-notebook-toolbar-dark.png')
    });
    await page.theme.setLightTheme();

    // When "Release GPU" is clicked, then cancelled, the kernel goes on
    const dialog = page.locator('.jp-Dialog');
    await release.click();
    await expect(dialog).toBeVisible();
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await expect(dialog).toHaveCount(0);
    expect(await kernelIds(page.request)).toContain(kernelId);
    await expect(item).toBeVisible();

    // When "Release GPU" is clicked, then a dialog says what will happen
    await release.click();
    await expect(dialog).toBeVisible();
    await expect(dialog).toContainText(
      `Release the GPUs of ${info.container}?`
    );
    await expect(dialog).toContainText(`Its GPUs (GPU ${index}) are freed`);
    await expect(dialog).toContainText('kept if it has uncommitted changes');
    await dialog.screenshot({
      path: testInfo.outputPath('gpudev-notebook-release-dialog.png')
    });

    // When it is confirmed
    await dialog.getByRole('button', { name: 'Release GPU' }).click();

    // Then the kernel is gone, its container no longer runs, its GPU is
    // free, and the item is hidden
    await expect
      .poll(() => kernelIds(page.request), { timeout: 60000 })
      .not.toContain(kernelId);
    startedKernels.delete(kernelId);
    await expect
      .poll(() => containerState(page.request, info.container), {
        timeout: 60000
      })
      .not.toBe('running');
    await expect
      .poll(() => leasedContainers(page.request), { timeout: 30000 })
      .not.toContain(info.container);
    expect(
      (await page.request.get(`/gpudev/api/kernels/${kernelId}`)).status()
    ).toBe(404);
    await expect(item).toBeHidden();
    await expect(item).toHaveClass(/lm-mod-hidden/);
    await toolbar.screenshot({
      path: testInfo.outputPath('gpudev-notebook-toolbar-released.png')
    });
  });

  test('a plain python3 notebook shows no item', async ({ page }) => {
    // Given a notebook with a python3 kernel
    const asked = kernelInfoAnswer(page);
    expect(
      await page.notebook.createNew(undefined, { kernel: 'python3' })
    ).toBeTruthy();

    // Then the item asked the server, which does not know the kernel
    expect((await asked).status()).toBe(404);
    const kernel = await sessionKernel(page.request, 'python3');
    expect(kernel).not.toBeNull();
    if (kernel) {
      startedKernels.add(kernel.id);
    }

    // And the item is there but hidden, not an empty box
    const item = toolbarItem(page);
    await expect(item).toHaveCount(1);
    await expect(item).toBeHidden();
    await expect(item).toHaveClass(/lm-mod-hidden/);
  });
});
