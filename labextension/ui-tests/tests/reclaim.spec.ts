import { expect, test } from '@jupyterlab/galata';
import type { APIRequestContext, Page } from '@playwright/test';

import { openPanel, removeLeftovers as removeAll } from './helpers';

/**
 * A kernel of the `gpu` environment (.devcontainer/gpu/devcontainer.json,
 * written by jupyter_server_test_config.py) leases one of the two fake GPUs
 * and runs in its own dev container on the real Docker engine. The server's
 * GPU culler is configured to release it after 20 s idle and to list it 15 s
 * before that (so 5 s after its last activity).
 */
const KERNEL_NAME = 'gpudev-gpu';

/** The reclaims are polled every 10 s: a warning shows within ~15 s. */
const WARNING_TIMEOUT = 20000;

/** Ids of the kernels the test started, shut down after it. */
const startedKernels = new Set<string>();

/** Names of the containers the test made, removed again after it. */
const madeContainers = new Set<string>();

interface IListedReclaim {
  kernel_id: string;
  container: string;
  gpu_uuids: string[];
  reclaim_at: number;
}

/** The pending reclaims, through the API. */
async function listReclaims(
  request: APIRequestContext
): Promise<IListedReclaim[]> {
  const listed = await request.get('/gpudev/api/reclaims');
  expect(listed.ok()).toBe(true);
  const body = (await listed.json()) as { reclaims: IListedReclaim[] };
  return body.reclaims;
}

/** The ids of the running kernels, through the API. */
async function kernelIds(request: APIRequestContext): Promise<string[]> {
  const listed = await request.get('/api/kernels');
  expect(listed.ok()).toBe(true);
  return ((await listed.json()) as { id: string }[]).map(kernel => kernel.id);
}

/** The warning toast of the kernel running in `container`. */
function reclaimToast(page: Page, container: string) {
  return page
    .locator('.Toastify__toast')
    .filter({ hasText: `GPU kernel in ${container}` });
}

/** Wait for the answer to a keep or release of `kernelId` from the page. */
function kernelAction(page: Page, kernelId: string, action: string) {
  return page.waitForResponse(
    response =>
      new URL(response.url()).pathname.endsWith(
        `/gpudev/api/kernels/${kernelId}/${action}`
      ) && response.request().method() === 'POST'
  );
}

/** Shut the test's kernels down and remove its containers. */
async function removeLeftovers(request: APIRequestContext): Promise<void> {
  await removeAll(request, startedKernels, madeContainers);
}

test.describe('Idle GPU kernel reclaim', () => {
  // Starting a GPU kernel in a container, then two warning windows.
  test.setTimeout(180000);
  // Galata's kernels fixture proxies every URL that contains /api/kernels,
  // /gpudev/api/kernels/ID/keep included, and fails on its empty 204 answer
  // (it expects a kernel model). The kernel is started and shut down here
  // through the API, so the mock is not needed.
  test.use({ kernels: null });

  test.afterEach(async ({ page }) => {
    await removeLeftovers(page.request);
  });

  test('warns about an idle GPU kernel, keeps it, then releases it', async ({
    page
  }, testInfo) => {
    // Given a GPU kernel started through the REST API (idle from then on)
    const started = await page.request.post('/api/kernels', {
      data: { name: KERNEL_NAME },
      timeout: 120000
    });
    expect(started.status()).toBe(201);
    const kernelId = ((await started.json()) as { id: string }).id;
    startedKernels.add(kernelId);
    // Its dedicated container is named after it.
    const container = `kernel-${kernelId}`;
    madeContainers.add(container);
    const panel = await openPanel(page);

    // When it has been idle for a while, then one warning toast shows
    const toast = reclaimToast(page, container);
    await expect(toast).toHaveCount(1, { timeout: WARNING_TIMEOUT });
    await expect(toast).toContainText('(1 GPU)');
    await expect(toast).toContainText(/will be released at \d{1,2}:\d{2}/);
    const pending = await listReclaims(page.request);
    expect(pending).toMatchObject([{ kernel_id: kernelId, container }]);
    expect(pending[0]?.gpu_uuids).toHaveLength(1);
    await toast.screenshot({
      path: testInfo.outputPath('gpudev-reclaim-toast.png')
    });

    // And its container's row in the panel shows it with the same actions
    const row = panel.getByTestId(`gpudev-container-${container}`);
    await expect(row).toBeVisible({ timeout: 15000 });
    await expect(row.getByTestId(`gpudev-reclaim-${container}`)).toContainText(
      /released at \d{1,2}:\d{2}/
    );
    await expect(
      row.getByTestId(`gpudev-reclaim-keep-${container}`)
    ).toBeEnabled();
    await expect(
      row.getByTestId(`gpudev-reclaim-release-${container}`)
    ).toBeEnabled();

    // When "Keep" is clicked in the toast
    const kept = kernelAction(page, kernelId, 'keep');
    await toast.getByRole('button', { name: 'Keep', exact: true }).click();
    expect((await kept).status()).toBe(204);

    // Then the kernel is no longer about to be reclaimed, and the warnings go
    expect(await listReclaims(page.request)).toEqual([]);
    await expect(toast).toHaveCount(0);
    await expect(row.getByTestId(`gpudev-reclaim-${container}`)).toHaveCount(0);
    expect(await kernelIds(page.request)).toContain(kernelId);

    // When it stays idle, then the warning comes back (once)
    await expect(toast).toHaveCount(1, { timeout: WARNING_TIMEOUT });
    const release = row.getByTestId(`gpudev-reclaim-release-${container}`);
    await expect(release).toBeVisible({ timeout: 15000 });
    await row.scrollIntoViewIfNeeded();
    await row.screenshot({
      path: testInfo.outputPath('gpudev-reclaim-row.png')
    });

    // When "Release now" is clicked in its row
    const released = kernelAction(page, kernelId, 'release');
    await release.click();
    expect((await released).status()).toBe(204);

    // Then the kernel is gone, its container stopped and kept, and the
    // warnings go
    await expect
      .poll(() => kernelIds(page.request), { timeout: 15000 })
      .not.toContain(kernelId);
    startedKernels.delete(kernelId);
    await expect(toast).toHaveCount(0);
    await expect(row.getByTestId(`gpudev-reclaim-${container}`)).toHaveCount(0);
    await expect(row).toHaveAttribute('data-state', 'exited', {
      timeout: 30000
    });
    expect(
      (await listReclaims(page.request)).map(r => r.kernel_id)
    ).not.toContain(kernelId);
  });
});
