import { expect, test } from '@jupyterlab/galata';
import type { APIRequestContext } from '@playwright/test';
import { execFileSync } from 'child_process';

import {
  getContainer,
  gpuKernelName,
  keepBusy,
  openPanel,
  removeLeftovers,
  SERVER_USER,
  sessionKernel
} from './helpers';

/**
 * GPU use by process in the panel. The fake nvidia-smi of the test server
 * lists as the GPUs' processes the lines of `gpu-processes.csv` in the
 * served folder (jupyter_server_test_config.py): here the host PID of a
 * real dev container's process, so the server maps it to that container
 * through the host's /proc, as it would on a GPU machine.
 */
const PROCESSES_FILE = 'gpu-processes.csv';

/** Names of the containers the test made, removed again after it. */
const madeContainers = new Set<string>();

/** Ids of the kernels the test started, shut down after it. */
const startedKernels = new Set<string>();

/** Starting a kernel makes its container first. */
const KERNEL_START_TIMEOUT = 120000;

interface IListedContainer {
  name: string;
  container_id: string;
  gpu_uuids: string[];
}

/** The host PID of the main process of the container `id` on the engine. */
function mainPid(id: string): string {
  const pid = execFileSync(
    'docker',
    ['inspect', '--format', '{{.State.Pid}}', id],
    { encoding: 'utf-8' }
  ).trim();
  expect(Number(pid)).toBeGreaterThan(0);
  return pid;
}

/** Make the fake nvidia-smi list `lines` (`uuid, pid, MiB`) as the GPUs' processes. */
async function listGPUProcesses(
  request: APIRequestContext,
  lines: string[]
): Promise<void> {
  const written = await request.put(`/api/contents/${PROCESSES_FILE}`, {
    data: {
      type: 'file',
      format: 'text',
      content: lines.map(line => `${line}\n`).join('')
    }
  });
  expect(written.ok()).toBe(true);
}

test.describe('GPU use', () => {
  // Starting a dev container on the real engine.
  test.setTimeout(240000);
  // Wide enough for the whole notebook toolbar.
  test.use({ viewport: { width: 1440, height: 900 } });
  // Galata's kernels fixture proxies every URL that contains /api/kernels;
  // the kernels are shut down here through the API.
  test.use({ kernels: null });

  test.afterEach(async ({ page }) => {
    await listGPUProcesses(page.request, []);
    await removeLeftovers(page.request, startedKernels, madeContainers);
  });

  test("shows a container's GPU memory in its row and on the host card", async ({
    page
  }, testInfo) => {
    // Given a dev container of the `gpu` environment (one fake GPU)
    const made = await page.request.post('/gpudev/api/containers', {
      data: { environment: 'gpu' },
      timeout: 120000
    });
    expect(made.status()).toBe(201);
    const container = (await made.json()) as IListedContainer;
    const name = container.name;
    madeContainers.add(name);
    expect(container.gpu_uuids).toHaveLength(1);
    const uuid = container.gpu_uuids[0] ?? '';

    // And the driver listing its main process (its host PID) with 4,300 MiB
    const pid = mainPid(container.container_id);
    await listGPUProcesses(page.request, [`${uuid}, ${pid}, 4300`]);

    // When the panel is open
    const panel = await openPanel(page);

    // Then the container's row shows what it holds on its GPU
    const row = panel.getByTestId(`gpudev-container-${name}`);
    const use = row.getByTestId(`gpudev-container-gpu-use-${name}-${uuid}`);
    await expect(use).toContainText('4.2 GiB', { timeout: 30000 });
    await expect(use).toContainText('A100');

    // And the host card names its owner using that GPU, with the memory
    const users = panel.getByTestId(`gpudev-gpu-users-${uuid}`);
    await expect(users).toContainText(SERVER_USER, { timeout: 30000 });
    await expect(users).toContainText('4.2 GiB');
    await panel.getByTestId(`gpudev-gpu-${uuid}`).screenshot({
      path: testInfo.outputPath('gpudev-gpu-users.png')
    });
    await row.scrollIntoViewIfNeeded();
    await row.screenshot({
      path: testInfo.outputPath('gpudev-container-gpu-use.png')
    });
  });

  test("shows what the notebook's kernel holds in its toolbar", async ({
    page
  }, testInfo) => {
    // Given a notebook whose kernel is a new dev container of `gpu`, kept busy
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
    const kernelURL = `/gpudev/api/kernels/${encodeURIComponent(kernelId)}`;
    await expect
      .poll(async () => (await page.request.get(kernelURL)).status(), {
        timeout: KERNEL_START_TIMEOUT
      })
      .toBe(200);
    const kernel = (await (await page.request.get(kernelURL)).json()) as {
      container: string;
      gpu_uuids: string[];
    };
    madeContainers.add(kernel.container);
    const item = page.locator(
      '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-gpudev-kernel-item'
    );
    await expect(item).toBeVisible({ timeout: KERNEL_START_TIMEOUT });
    await keepBusy(page);
    const uuid = kernel.gpu_uuids[0] ?? '';

    // When the driver lists its container's process (made for this kernel)
    // on its GPU with 4,300 MiB
    const made = await getContainer<
      IListedContainer & { owner: string; environment: string }
    >(page.request, kernel.container);
    await listGPUProcesses(page.request, [
      `${uuid}, ${mainPid(made.container_id)}, 4300`
    ]);

    // Then the item shows its memory and the GPU's name, polled while shown
    const usage = item.getByTestId('gpudev-kernel-usage');
    await expect(usage).toHaveText('A100 · 4.2 GiB', { timeout: 30000 });
    // And its tooltip the whole GPU's use
    expect(await usage.getAttribute('title')).toContain('whole GPU:');
    await item.screenshot({
      path: testInfo.outputPath('gpudev-kernel-usage.png')
    });
  });
});
