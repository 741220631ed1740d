import { expect, test } from '@jupyterlab/galata';
import type { APIRequestContext } from '@playwright/test';
import { execFile } from 'child_process';
import { promisify } from 'util';

import { containersOf, getContainer, openPanel } from './helpers';

const run = promisify(execFile);

/**
 * A page a proxied app could serve: its script tries to read Jupyter's
 * cookies, to open a terminal as the user with the _xsrf token, and to fetch a
 * file of its own app; it writes what happened into the body.
 */
const EVIL_PAGE = `<!doctype html><html><body><script>
(async () => {
  const out = {};
  try { out.cookie = document.cookie; } catch (e) { out.cookie = 'blocked: ' + e.name; }
  const match = typeof out.cookie === 'string' && out.cookie.match(/_xsrf=([^;]+)/);
  out.xsrf = match ? match[1] : '';
  try {
    const made = await fetch('/api/terminals', {
      method: 'POST', credentials: 'include', headers: { 'X-XSRFToken': out.xsrf }
    });
    out.terminals = made.status;
  } catch (e) { out.terminals = 'blocked: ' + e.name; }
  try {
    out.own = (await (await fetch('hello-gpudev.txt')).text()).trim();
  } catch (e) { out.own = 'blocked: ' + e.name; }
  document.body.setAttribute('data-result', JSON.stringify(out));
})();
</script></body></html>`;

/** How many Jupyter terminals the server has. */
async function terminalCount(request: APIRequestContext): Promise<number> {
  const listed = await request.get('/api/terminals');
  expect(listed.ok()).toBe(true);
  return ((await listed.json()) as unknown[]).length;
}

/**
 * The `web` environment of the test configuration: the kernel image, no GPU,
 * `"forwardPorts": [8000]` (served by the server's proxy).
 */
const WEB_ENV = 'web';

/** The host the first test tries to add; it must never stay. */
const BAD_HOST = 'bad';

/** A host added (unchecked) through the API, then removed from the panel. */
const ADDED_HOST = 'gone';

/** Names of the containers a test started, removed again after it. */
const started = new Set<string>();

interface IListedContainer {
  name: string;
  container_id: string;
  owner: string;
  environment: string;
  state: string;
  web_ports: number[];
}

/** The names of the hosts the server lists (reachable or not). */
async function hostNames(request: APIRequestContext): Promise<string[]> {
  const listed = await request.get('/gpudev/api/hosts');
  // 503 when no host answers: the body still lists them, in details.
  type Listed = { name?: string; host?: string }[];
  const body = (await listed.json()) as {
    hosts?: Listed;
    details?: { hosts?: Listed };
  };
  const hosts = body.hosts ?? body.details?.hosts ?? [];
  return hosts.map(host => host.name ?? host.host ?? '');
}

test.describe('Remote hosts and web ports', () => {
  test.afterEach(async ({ page }) => {
    // Nothing a test made stays: the host it tried to add, its containers.
    const hosts = await hostNames(page.request);
    for (const host of [BAD_HOST, ADDED_HOST].filter(h => hosts.includes(h))) {
      const removedHost = await page.request.delete(
        `/gpudev/api/hosts/${host}`
      );
      expect([204, 404]).toContain(removedHost.status());
    }
    const names = new Set(started);
    for (const environment of [WEB_ENV, 'gpu']) {
      for (const container of await containersOf<IListedContainer>(
        page.request,
        environment
      )) {
        names.add(container.name);
      }
    }
    for (const name of names) {
      const removed = await page.request.delete(
        `/gpudev/api/containers/${encodeURIComponent(name)}?force=1`
      );
      expect([204, 404]).toContain(removed.status());
    }
    started.clear();
  });

  test('adding a host that does not answer shows why in the form and adds nothing', async ({
    page
  }, testInfo) => {
    test.setTimeout(120000);
    // Given the panel, with its Add host button
    const panel = await openPanel(page);
    const toggle = panel.getByTestId('gpudev-add-host');
    await expect(toggle).toHaveAttribute('aria-expanded', 'false');
    expect(await hostNames(page.request)).not.toContain(BAD_HOST);

    // When it is clicked, then a form opens with the focus in its Name field
    await toggle.click();
    await expect(toggle).toHaveAttribute('aria-expanded', 'true');
    const form = panel.getByTestId('gpudev-add-host-form');
    await expect(form).toBeVisible();
    const name = form.getByLabel('Name', { exact: true });
    const url = form.getByLabel('URL', { exact: true });
    await expect(name).toBeFocused();
    await expect(url).toHaveAttribute('placeholder', 'ssh://user@gpu-box');
    for (const label of [
      'Identity file (optional)',
      'known_hosts file (optional)'
    ]) {
      await expect(form.getByLabel(label, { exact: true })).toBeVisible();
    }
    // A host's workspace is the administrator's to choose, never the form's
    await expect(form.getByLabel(/workspace/i)).toHaveCount(0);
    const submit = form.getByTestId('gpudev-add-host-submit');

    // When it is sent empty, then it says what is missing without asking the server
    await submit.click();
    await expect(name).toHaveAttribute('aria-invalid', 'true');
    await expect(form).toContainText('Enter a name for the host.');
    await expect(form).toContainText('Enter the URL of the host.');
    await expect(name).toBeFocused();

    // When an ssh:// host is entered without its key, the form asks for it
    await name.fill(BAD_HOST);
    await url.fill('ssh://root@127.0.0.1:1');
    await submit.click();
    const identity = form.getByLabel('Identity file (optional)', {
      exact: true
    });
    await expect(identity).toBeFocused();
    await expect(form).toContainText("never the server's");

    // When a host where nothing listens is entered with a key and sent
    await identity.fill('/nonexistent/id_galata');
    const answered = page.waitForResponse(
      response =>
        new URL(response.url()).pathname.endsWith('/gpudev/api/hosts') &&
        response.request().method() === 'POST',
      { timeout: 90000 }
    );
    await submit.click();
    const response = await answered;

    // Then the server refuses it as not answering, and the form shows its
    // message in full, keeping what was typed
    expect(response.status()).toBe(503);
    const body = (await response.json()) as { message: string };
    expect(body.message).toContain('127.0.0.1');
    const error = form.getByTestId('gpudev-add-host-error');
    await expect(error).toBeVisible();
    await expect(error).toHaveAttribute('role', 'alert');
    await expect(error).toContainText('127.0.0.1');
    await expect(error).toContainText(body.message);
    await expect(error).toContainText('HTTP 503');
    await expect(name).toHaveValue(BAD_HOST);
    await expect(url).toHaveValue('ssh://root@127.0.0.1:1');
    await expect(submit).toHaveText('Add host');
    await form.scrollIntoViewIfNeeded();
    await panel.screenshot({
      path: testInfo.outputPath('gpudev-add-host-error.png')
    });

    // And the host is not added
    expect(await hostNames(page.request)).not.toContain(BAD_HOST);
    await panel.getByRole('button', { name: 'Refresh' }).click();
    await expect(panel.getByTestId(`gpudev-host-${BAD_HOST}`)).toHaveCount(0);
    await expect(form).toBeVisible();

    // When Escape is pressed, then the form closes and the focus goes back
    await name.focus();
    await page.keyboard.press('Escape');
    await expect(form).toHaveCount(0);
    await expect(toggle).toBeFocused();
    await expect(toggle).toHaveAttribute('aria-expanded', 'false');
  });

  test('an added host shows its transport, origin and workspace, and can be removed after a confirmation', async ({
    page
  }, testInfo) => {
    test.setTimeout(120000);
    // Given a remote host added without connecting to it (nothing listens there)
    const made = await page.request.post('/gpudev/api/hosts', {
      data: {
        name: ADDED_HOST,
        url: 'ssh://root@127.0.0.1:1',
        identity_file: '/nonexistent/id_galata',
        check: false
      }
    });
    expect(made.status()).toBe(201);
    const host = (await made.json()) as { origin: string; transport: string };
    expect(host.origin).toBe('added');
    expect(host.transport).toBe('ssh');

    // Then its card says how it is reached, where it comes from, its
    // workspace and why it is unreachable; only it has a Remove button
    const panel = await openPanel(page);
    const card = panel.getByTestId(`gpudev-host-${ADDED_HOST}`);
    await expect(card).toBeVisible({ timeout: 30000 });
    await expect(card.getByTestId(`gpudev-host-kind-${ADDED_HOST}`)).toHaveText(
      'SSH · added'
    );
    await expect(
      card.getByTestId(`gpudev-host-workspace-${ADDED_HOST}`)
    ).toHaveText('/srv/work');
    await expect(card.getByText('unreachable', { exact: true })).toBeVisible();
    await expect(card).toContainText('127.0.0.1');
    await expect(panel.getByTestId('gpudev-host-remove-local')).toHaveCount(0);
    const remove = card.getByRole('button', {
      name: `Remove host ${ADDED_HOST}`
    });
    await card.scrollIntoViewIfNeeded();
    await card.screenshot({
      path: testInfo.outputPath('gpudev-added-host.png')
    });

    // When more GPUs than any host has are asked for, with no host named
    // (the server places a start on a host that can take it)
    const gpuEnv = panel.getByTestId('gpudev-env-gpu');
    await expect(gpuEnv).toBeVisible();
    await panel.getByTestId('gpudev-env-gpus-gpu').fill('3');
    const started = page.waitForResponse(
      response =>
        new URL(response.url()).pathname.endsWith('/gpudev/api/containers') &&
        response.request().method() === 'POST'
    );
    await panel.getByTestId('gpudev-env-start-gpu').click();
    const sent = (await started).request().postDataJSON() as {
      host?: string;
    };
    expect(sent.host).toBeUndefined();

    // Then the error says no host can take it, and its details say why for
    // each host, one line per host
    const toast = page
      .locator('.Toastify__toast')
      .filter({ hasText: 'No host can start' });
    await expect(toast).toHaveCount(1, { timeout: 60000 });
    await toast.getByRole('button', { name: 'Show details' }).click();
    const dialog = page.locator('.jp-Dialog');
    const reasons = dialog.getByTestId('gpudev-error-host-reasons');
    await expect(reasons).toBeVisible();
    await expect(reasons.locator('li')).toHaveCount(2);
    await expect(
      reasons.locator('li').filter({ hasText: 'local' })
    ).toHaveCount(1);
    await expect(
      reasons.locator('li').filter({ hasText: `${ADDED_HOST}:` })
    ).toContainText('127.0.0.1');
    await expect(dialog).toContainText('HTTP 409');
    await dialog.screenshot({
      path: testInfo.outputPath('gpudev-no-host-details.png')
    });
    await page.keyboard.press('Escape');
    await expect(dialog).toHaveCount(0);
    expect(
      await containersOf<IListedContainer>(page.request, 'gpu')
    ).toHaveLength(0);

    // When Remove is clicked and the dialog cancelled, then it stays
    await remove.click();
    await expect(dialog).toContainText(`Remove host ${ADDED_HOST}?`);
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await expect(dialog).toHaveCount(0);
    expect(await hostNames(page.request)).toContain(ADDED_HOST);
    await expect(card).toBeVisible();

    // When it is confirmed
    const deleted = page.waitForResponse(
      response =>
        new URL(response.url()).pathname.endsWith(
          `/gpudev/api/hosts/${ADDED_HOST}`
        ) && response.request().method() === 'DELETE'
    );
    await remove.click();
    await dialog.getByRole('button', { name: 'Remove' }).click();
    expect((await deleted).status()).toBe(204);

    // Then its card goes, the focus moves to Add host, and the server forgot it
    await expect(card).toHaveCount(0);
    await expect(panel.getByTestId('gpudev-add-host')).toBeFocused();
    expect(await hostNames(page.request)).not.toContain(ADDED_HOST);
  });

  test('a forwarded web port of a dev container opens through the proxy, and ports can be added and removed', async ({
    page
  }, testInfo) => {
    // Creating and stopping a container takes a while.
    test.setTimeout(180000);
    // Given the panel listing the web environment
    const panel = await openPanel(page);
    const environment = panel.getByTestId(`gpudev-env-${WEB_ENV}`);
    await expect(environment).toBeVisible({ timeout: 30000 });
    await expect(environment).toContainText('CPU');
    expect(
      await containersOf<IListedContainer>(page.request, WEB_ENV)
    ).toHaveLength(0);

    // When it is started from the panel
    await panel.getByTestId(`gpudev-env-start-${WEB_ENV}`).click();
    let container: IListedContainer | undefined;
    await expect(async () => {
      const mine = await containersOf<IListedContainer>(page.request, WEB_ENV);
      expect(mine).toHaveLength(1);
      container = mine[0];
    }).toPass({ timeout: 90000 });
    if (!container) {
      throw new Error('no container');
    }
    const name = container.name;
    started.add(name);
    const row = panel.getByTestId(`gpudev-container-${name}`);
    await expect(row).toHaveAttribute('data-state', 'running', {
      timeout: 90000
    });
    expect(
      (await getContainer<IListedContainer>(page.request, name)).web_ports
    ).toEqual([8000]);

    // And a web server listens on its port 8000
    await run('docker', [
      'exec',
      '--detach',
      container.container_id,
      'sh',
      '-c',
      'mkdir -p /tmp/www && echo hello > /tmp/www/hello-gpudev.txt && cd /tmp/www && exec python3 -m http.server 8000'
    ]);

    // Then its row links to the port through the server's proxy
    const link = row.getByRole('link', { name: 'Open :8000' });
    await expect(link).toBeVisible();
    await expect(link).toHaveAttribute('target', '_blank');
    await expect(link).toHaveAttribute('rel', /\bnoopener\b/);
    const href = await link.getAttribute('href');
    expect(href).toBeTruthy();
    const target = new URL(href ?? '', page.url());
    expect(target.pathname).toBe(
      `/gpudev/proxy/${encodeURIComponent(name)}/8000/`
    );

    // And the link answers, with the page's credentials, the server's listing
    await expect(async () => {
      const got = await page.request.get(target.href);
      expect(got.status()).toBe(200);
      const text = await got.text();
      expect(text).toContain('Directory listing for /');
      expect(text).toContain('hello-gpudev.txt');
    }).toPass({ timeout: 30000 });
    await row.scrollIntoViewIfNeeded();
    await row.screenshot({
      path: testInfo.outputPath('gpudev-web-port.png')
    });

    // When the app serves a page whose script tries to act as the Jupyter user
    // (read the _xsrf cookie, open a terminal) and to use the app itself
    await run('docker', [
      'exec',
      '-e',
      `PAGE=${EVIL_PAGE}`,
      container.container_id,
      'sh',
      '-c',
      'printf %s "$PAGE" > /tmp/www/evil.html'
    ]);
    const terminalsBefore = await terminalCount(page.request);
    const appPage = await page.context().newPage();
    await appPage.goto(`${target.href}evil.html`);
    // Then the browser was sent to the app's sandboxed address
    expect(new URL(appPage.url()).pathname).toMatch(
      /^\/gpudev\/app\/[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\/evil\.html$/
    );
    const result = await appPage
      .locator('body[data-result]')
      .getAttribute('data-result', { timeout: 30000 });
    const seen = JSON.parse(result ?? '{}') as {
      cookie: string;
      xsrf: string;
      terminals: string | number;
      own: string;
    };
    // And its script could read no Jupyter cookie, and could not open a terminal
    expect(seen.cookie).toMatch(/^blocked: /);
    expect(seen.xsrf).toBe('');
    expect(String(seen.terminals)).toMatch(/^(blocked: |403)/);
    expect(await terminalCount(page.request)).toBe(terminalsBefore);
    // But it reached its own app
    expect(seen.own).toBe('hello');
    await appPage.close();

    // When a port out of range is entered, then the row says so and asks nothing
    const input = row.getByLabel(`Port of ${name} to serve`);
    const add = row.getByTestId(`gpudev-web-port-add-${name}`);
    const error = row.getByTestId(`gpudev-web-port-error-${name}`);
    await input.fill('70000');
    await add.click();
    await expect(error).toHaveText('Enter a port number from 1 to 65535.');
    await expect(input).toHaveAttribute('aria-invalid', 'true');
    expect(
      (await getContainer<IListedContainer>(page.request, name)).web_ports
    ).toEqual([8000]);

    // When port 8001 is added
    await input.fill('8001');
    await expect(error).toHaveCount(0);
    const added = page.waitForResponse(
      response =>
        new URL(response.url()).pathname.endsWith(
          `/gpudev/api/containers/${name}/ports`
        ) && response.request().method() === 'POST'
    );
    await add.click();
    expect((await added).status()).toBe(200);

    // Then it is linked too, and the server serves it
    await expect(row.getByRole('link', { name: 'Open :8001' })).toBeVisible();
    await expect(input).toHaveValue('');
    expect(
      (await getContainer<IListedContainer>(page.request, name)).web_ports
    ).toEqual([8000, 8001]);
    await row.screenshot({
      path: testInfo.outputPath('gpudev-web-ports-added.png')
    });

    // When its × is clicked, then it goes, and port 8000 stays
    const removed = page.waitForResponse(
      response =>
        new URL(response.url()).pathname.endsWith(
          `/gpudev/api/containers/${name}/ports/8001`
        ) && response.request().method() === 'DELETE'
    );
    await row
      .getByRole('button', { name: `Stop serving port 8001 of ${name}` })
      .click();
    expect((await removed).status()).toBe(200);
    await expect(row.getByRole('link', { name: 'Open :8001' })).toHaveCount(0);
    await expect(row.getByRole('link', { name: 'Open :8000' })).toBeVisible();
    await expect(input).toBeFocused();
    expect(
      (await getContainer<IListedContainer>(page.request, name)).web_ports
    ).toEqual([8000]);
  });
});
