import { expect, test } from '@jupyterlab/galata';
import type { APIRequestContext } from '@playwright/test';

import { SERVER_USER, containersOf, getContainer, openPanel } from './helpers';

/**
 * A dev container from the built-in `default` environment (the kernel image
 * gpudev-python:bookworm, no GPU), on the real Docker engine of this machine.
 */
const ENV = 'default';

/** Names of the containers the test started, removed again after it. */
const started = new Set<string>();

/** Names of the Jupyter terminals the test opened, shut down after it. */
const openedTerminals = new Set<string>();

interface IListedContainer {
  name: string;
  owner: string;
  environment: string;
  state: string;
  pinned: boolean;
  kernel_id: string | null;
}

/** Shut a Jupyter terminal down (it may be gone already). */
async function shutDownTerminal(
  request: APIRequestContext,
  name: string
): Promise<void> {
  const deleted = await request.delete(
    `/api/terminals/${encodeURIComponent(name)}`
  );
  expect([204, 404]).toContain(deleted.status());
  openedTerminals.delete(name);
}

/**
 * Remove, whatever state they are in, the containers this test started and
 * any other container of the browser's user, so a failed run leaves nothing.
 * The terminals it opened are shut down first.
 */
async function removeLeftovers(request: APIRequestContext): Promise<void> {
  for (const name of [...openedTerminals]) {
    await shutDownTerminal(request, name);
  }
  const names = new Set(started);
  for (const container of await containersOf<IListedContainer>(request, ENV)) {
    names.add(container.name);
  }
  for (const name of names) {
    const removed = await request.delete(
      `/gpudev/api/containers/${encodeURIComponent(name)}?force=1`
    );
    expect([204, 404]).toContain(removed.status());
  }
  started.clear();
}

test.describe('Dev containers', () => {
  // Pulling nothing, but creating and stopping a container takes a while.
  test.setTimeout(180000);
  // Galata's terminals fixture mocks GET /api/terminals to list only the
  // terminals the page made through /api/terminals; a container's terminal is
  // made through the gpudev API, so terminal:open would not find it (and
  // would start a new one on the server's host under its name).
  test.use({ terminals: null });

  test.afterEach(async ({ page }) => {
    await removeLeftovers(page.request);
  });

  test('start a CPU container from an environment, open a terminal in it, stop it, remove it', async ({
    page
  }, testInfo) => {
    // Given the panel listing the default environment
    const panel = await openPanel(page);
    const environment = panel.getByTestId(`gpudev-env-${ENV}`);
    await expect(environment).toBeVisible({ timeout: 30000 });
    await expect(environment).toContainText('CPU');
    const gpus = panel.getByTestId(`gpudev-env-gpus-${ENV}`);
    if ((await gpus.inputValue()) !== '0') {
      await gpus.fill('0');
    }

    // When it is started
    expect(
      await containersOf<IListedContainer>(page.request, ENV)
    ).toHaveLength(0);
    const answered = page.waitForResponse(
      response =>
        new URL(response.url()).pathname.endsWith('/gpudev/api/containers') &&
        response.request().method() === 'POST'
    );
    await panel.getByTestId(`gpudev-env-start-${ENV}`).click();
    const response = await answered;
    expect(response.status()).toBe(200);
    expect(response.headers()['content-type']).toContain('text/event-stream');
    let name = '';
    await expect(async () => {
      const mine = await containersOf<IListedContainer>(page.request, ENV);
      expect(mine).toHaveLength(1);
      name = mine[0]?.name ?? '';
      // It belongs to the server's user, whoever logged in with the token
      expect(mine[0]?.owner).toBe(SERVER_USER);
    }).toPass({ timeout: 60000 });
    started.add(name);

    // Then its row shows it running, without GPUs, and the progress is gone
    const row = panel.getByTestId(`gpudev-container-${name}`);
    await expect(row).toHaveAttribute('data-state', 'running', {
      timeout: 60000
    });
    await expect(row).toContainText(ENV);
    await expect(row).toContainText('none (CPU)');
    // The streamed result arrived (it is what raises this notification).
    await expect(
      page.getByText(`GPU Dev: ${name} is running`).first()
    ).toBeVisible();
    await expect(panel.getByTestId(`gpudev-start-progress-${ENV}`)).toHaveCount(
      0
    );
    await expect(panel.getByTestId(`gpudev-env-start-${ENV}`)).toBeEnabled();
    await row.scrollIntoViewIfNeeded();
    await panel.screenshot({
      path: testInfo.outputPath('gpudev-containers.png')
    });

    // When a terminal is opened in it from its row
    // xterm draws on a canvas (WebGL or 2D): what the terminal shows is read
    // from the stdout messages of its websocket instead of the page.
    const output = new Map<string, string>();
    page.on('websocket', socket => {
      const match = /\/terminals\/websocket\/([^/?#]+)/.exec(socket.url());
      if (!match) {
        return;
      }
      const terminal = decodeURIComponent(match[1]);
      socket.on('framereceived', frame => {
        const payload =
          typeof frame.payload === 'string'
            ? frame.payload
            : frame.payload.toString('utf8');
        let message: unknown;
        try {
          message = JSON.parse(payload);
        } catch {
          return;
        }
        if (
          Array.isArray(message) &&
          message[0] === 'stdout' &&
          typeof message[1] === 'string'
        ) {
          output.set(terminal, (output.get(terminal) ?? '') + message[1]);
        }
      });
    });
    const terminalButton = row.getByTestId(`gpudev-container-terminal-${name}`);
    await expect(terminalButton).toBeEnabled();
    await expect(terminalButton).toHaveAttribute(
      'aria-label',
      `Terminal ${name}`
    );
    const made = page.waitForResponse(
      response =>
        new URL(response.url()).pathname.endsWith(
          `/gpudev/api/containers/${name}/terminal`
        ) && response.request().method() === 'POST'
    );
    await terminalButton.click();
    const madeResponse = await made;
    expect(madeResponse.status()).toBe(201);
    const terminalName = ((await madeResponse.json()) as { name: string }).name;
    expect(terminalName).toBeTruthy();
    openedTerminals.add(terminalName);

    // Then it opens in the main area, with a shell inside the container
    const terminalTab = page.activity.getTabLocator(`Terminal ${terminalName}`);
    await expect(terminalTab).toBeVisible({ timeout: 30000 });
    const terminalView = page.getByRole('main').locator('.jp-Terminal');
    await expect(terminalView).toBeVisible({ timeout: 30000 });
    await expect(terminalButton).toBeEnabled();
    // The shell is ready once it has printed its prompt.
    await expect
      .poll(() => output.get(terminalName) ?? '', { timeout: 30000 })
      .not.toBe('');
    await terminalView.click();
    await page.keyboard.type('echo in-$(hostname)-ok');
    await page.keyboard.press('Enter');
    // The container's hostname is its name, cut to the 63 characters allowed.
    const expected = `in-${name.slice(0, 63)}-ok`;
    await expect
      .poll(() => output.get(terminalName) ?? '', { timeout: 30000 })
      .toContain(expected);
    await terminalView.screenshot({
      path: testInfo.outputPath('gpudev-terminal.png')
    });

    // When its tab is closed and the terminal shut down
    await terminalTab.locator('.lm-TabBar-tabCloseIcon').click();
    await expect(terminalTab).toHaveCount(0);
    await shutDownTerminal(page.request, terminalName);
    const running = await page.request.get('/api/terminals');
    expect(running.ok()).toBe(true);
    expect(
      ((await running.json()) as { name: string }[]).map(t => t.name)
    ).not.toContain(terminalName);

    // When it is stopped, then it shows exited and can be started or removed
    await row.getByTestId(`gpudev-container-stop-${name}`).click();
    await expect(row).toHaveAttribute('data-state', 'exited', {
      timeout: 60000
    });
    await expect(
      row.getByTestId(`gpudev-container-start-${name}`)
    ).toBeVisible();
    await expect(
      row.getByTestId(`gpudev-container-terminal-${name}`)
    ).toHaveCount(0);

    // When it is removed (confirming if it has changes), then its row goes
    await row.getByTestId(`gpudev-container-remove-${name}`).click();
    const confirm = page
      .locator('.jp-Dialog')
      .getByRole('button', { name: 'Remove anyway' });
    await expect(async () => {
      if (await confirm.isVisible()) {
        await confirm.click();
      }
      await expect(row).toHaveCount(0, { timeout: 1000 });
    }).toPass({ timeout: 60000 });
    started.delete(name);
  });

  test('pin a shared container from its row, then unpin it', async ({
    page
  }, testInfo) => {
    // Given a CPU container started through the REST API (no kernel: shared)
    const made = await page.request.post('/gpudev/api/containers', {
      data: { environment: ENV, gpus: 0 },
      timeout: 120000
    });
    expect(made.status()).toBe(201);
    const container = (await made.json()) as IListedContainer;
    const name = container.name;
    expect(name).toBeTruthy();
    started.add(name);
    expect(container.kernel_id).toBeNull();
    expect(container.pinned).toBe(false);

    // Then its row has an unpressed Pin button and no pinned badge
    const panel = await openPanel(page);
    const row = panel.getByTestId(`gpudev-container-${name}`);
    await expect(row).toHaveAttribute('data-state', 'running', {
      timeout: 60000
    });
    const pin = row.getByTestId(`gpudev-container-pin-${name}`);
    const badge = row.getByTestId(`gpudev-container-pinned-${name}`);
    await expect(pin).toHaveText('Pin');
    await expect(pin).toHaveAttribute('aria-pressed', 'false');
    await expect(pin).toHaveAttribute(
      'title',
      'Keep it running, with its GPUs, after its last kernel ends'
    );
    await expect(badge).toHaveCount(0);
    await expect(
      row.getByTestId(`gpudev-container-kernel-${name}`)
    ).toHaveCount(0);

    // When Pin is clicked
    const pinned = page.waitForResponse(
      response =>
        new URL(response.url()).pathname.endsWith(
          `/gpudev/api/containers/${name}/pin`
        ) && response.request().method() === 'PUT'
    );
    await pin.click();
    expect((await pinned).status()).toBe(200);

    // Then the row shows it pinned, and so does the server
    await expect(badge).toBeVisible();
    await expect(badge).toHaveText('pinned');
    await expect(pin).toHaveAttribute('aria-pressed', 'true');
    await expect(pin).toHaveText('Unpin');
    await expect(pin).toHaveAttribute(
      'title',
      'Let it stop when its last kernel ends'
    );
    expect(
      (await getContainer<IListedContainer>(page.request, name)).pinned
    ).toBe(true);
    await row.scrollIntoViewIfNeeded();
    await row.screenshot({
      path: testInfo.outputPath('gpudev-container-pinned.png')
    });

    // When Unpin is clicked
    const unpinned = page.waitForResponse(
      response =>
        new URL(response.url()).pathname.endsWith(
          `/gpudev/api/containers/${name}/pin`
        ) && response.request().method() === 'DELETE'
    );
    await pin.click();
    expect((await unpinned).status()).toBe(200);

    // Then the badge goes and the server has it unpinned
    await expect(badge).toHaveCount(0);
    await expect(pin).toHaveAttribute('aria-pressed', 'false');
    await expect(pin).toHaveText('Pin');
    expect(
      (await getContainer<IListedContainer>(page.request, name)).pinned
    ).toBe(false);
    // It still runs: unpinning stops nothing by itself.
    await expect(row).toHaveAttribute('data-state', 'running');
  });
});
