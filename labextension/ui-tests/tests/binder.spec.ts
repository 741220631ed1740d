import { expect, test } from '@jupyterlab/galata';
import type { ChildProcess } from 'child_process';
import { spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { PANEL_ID } from './helpers';

/**
 * Where no Docker engine is reachable (Binder, a laptop without Docker) the
 * panel says so and explains how to add a remote host. A second, real
 * Jupyter server is started for it, with the same configuration as the
 * tests' but its local engine at a socket nothing listens on.
 */
const PORT = 8899;
const BASE = `http://localhost:${PORT}`;
const UI_TESTS = path.resolve(__dirname, '..');

/** Ask `url` until it answers (any status) or `timeout` ms pass. */
async function waitForServer(url: string, timeout: number): Promise<void> {
  const end = Date.now() + timeout;
  for (;;) {
    try {
      await fetch(url);
      return;
    } catch {
      if (Date.now() > end) {
        throw new Error(`${url} did not answer within ${timeout} ms`);
      }
      await new Promise(resolve => setTimeout(resolve, 500));
    }
  }
}

test.describe('GPU Dev without a Docker engine', () => {
  let server: ChildProcess | null = null;
  let output = '';

  test.beforeAll(async () => {
    // Settings of its own: JupyterLab's question about its news (a toast that
    // a fresh profile shows a few seconds after the page loads) is answered,
    // as Galata answers it for the page of its own server; on a slow machine
    // it came up as the form opened and took the focus from it.
    const settings = fs.mkdtempSync(
      path.join(os.tmpdir(), 'gpudev-ui-settings-')
    );
    const notification = path.join(
      settings,
      '@jupyterlab',
      'apputils-extension'
    );
    fs.mkdirSync(notification, { recursive: true });
    fs.writeFileSync(
      path.join(notification, 'notification.jupyterlab-settings'),
      JSON.stringify({ fetchNews: 'false' })
    );
    server = spawn(
      'jupyter',
      [
        'lab',
        '--config',
        'jupyter_server_test_config.py',
        `--ServerApp.port=${PORT}`,
        `--LabApp.user_settings_dir=${settings}`
      ],
      {
        cwd: UI_TESTS,
        env: {
          ...process.env,
          DOCKER_HOST: 'unix:///tmp/gpudev-ui-no-engine.sock'
        },
        stdio: ['ignore', 'pipe', 'pipe']
      }
    );
    const keep = (chunk: Buffer): void => {
      output = (output + chunk.toString()).slice(-20000);
    };
    server.stdout?.on('data', keep);
    server.stderr?.on('data', keep);
    await waitForServer(`${BASE}/lab`, 60000).catch((reason: unknown) => {
      throw new Error(`${String(reason)}\n${output}`);
    });
  });

  test.afterAll(() => {
    server?.kill('SIGTERM');
  });

  test('the panel says so and offers to add a remote host', async ({
    browser
  }, testInfo) => {
    const page = await browser.newPage();
    try {
      await page.goto(`${BASE}/lab`);
      const tab = page.locator(`.jp-SideBar [data-id="${PANEL_ID}"]`);
      await expect(tab).toBeVisible({ timeout: 60000 });
      await tab.click();
      const panel = page.locator(`#${PANEL_ID}`);
      // Then the hosts section says no engine answers, why, and what to do
      await expect(panel.getByRole('alert').first()).toContainText(
        'No Docker host is reachable',
        { timeout: 30000 }
      );
      await expect(panel).toContainText('gpudev-ui-no-engine.sock');
      const hint = panel.getByTestId('gpudev-hosts-empty');
      await expect(hint).toContainText('add it as a remote host');
      await expect(hint).toContainText('ssh://user@host');
      // And its Add host button opens the form
      await hint.getByTestId('gpudev-add-host-empty').click();
      await expect(panel.getByRole('textbox').first()).toBeFocused();
      await page.screenshot({ path: testInfo.outputPath('no-engine.png') });
    } finally {
      await page.close();
    }
  });
});
