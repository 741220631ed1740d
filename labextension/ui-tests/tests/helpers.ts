import { expect } from '@jupyterlab/galata';
import type { IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { APIRequestContext, TestInfo } from '@playwright/test';

/** The id of the GPU Dev panel in the shell. */
export const PANEL_ID = 'gpudev-panel';

/** Open the GPU Dev panel from its sidebar tab; returns the panel. */
export async function openPanel(page: IJupyterLabPageFixture) {
  const tab = page.sidebar.getTabLocator(PANEL_ID);
  await expect(tab).toHaveAttribute('title', 'GPU Dev');
  await tab.click();
  const panel = page.locator(`#${PANEL_ID}`);
  await expect(panel).toBeVisible();
  return panel;
}

/** What every listed dev container has (a spec narrows it to what it reads). */
export interface IOwnedContainer {
  name: string;
  owner: string;
  environment: string;
}

/**
 * The user the test server acts for (`c.Access.user` in
 * jupyter_server_test_config.py): it owns every container the tests start,
 * whoever is logged in.
 */
export const SERVER_USER = 'galata';

/** One dev container, through the API. */
export async function getContainer<T extends IOwnedContainer>(
  request: APIRequestContext,
  name: string
): Promise<T> {
  const got = await request.get(
    `/gpudev/api/containers/${encodeURIComponent(name)}`
  );
  expect(got.ok()).toBe(true);
  return (await got.json()) as T;
}

/**
 * The dev containers of `environment`, through the API (the specs run one
 * at a time, each with environments of its own, and clean up after).
 */
export async function containersOf<T extends IOwnedContainer>(
  request: APIRequestContext,
  environment: string
): Promise<T[]> {
  const listed = await request.get('/gpudev/api/containers?all=1');
  expect(listed.ok()).toBe(true);
  const body = (await listed.json()) as { containers: T[] };
  return body.containers.filter(
    container => container.environment === environment
  );
}

/** Keep a screenshot of the page as a test artefact (also attached to the report). */
export async function shot(
  page: IJupyterLabPageFixture,
  testInfo: TestInfo,
  name: string
): Promise<void> {
  const path = testInfo.outputPath(`${name}.png`);
  await page.screenshot({ path });
  await testInfo.attach(name, { path, contentType: 'image/png' });
}

/**
 * Shut the given kernels down (they may be gone already), then force-remove
 * the given containers, so a failed run leaves nothing behind; both sets are
 * emptied.
 */
export async function removeLeftovers(
  request: APIRequestContext,
  kernels: Set<string>,
  containers: Set<string>
): Promise<void> {
  for (const id of [...kernels]) {
    const deleted = await request.delete(
      `/api/kernels/${encodeURIComponent(id)}`,
      { timeout: 60000 }
    );
    expect([204, 404]).toContain(deleted.status());
    kernels.delete(id);
  }
  for (const name of [...containers]) {
    const removed = await request.delete(
      `/gpudev/api/containers/${encodeURIComponent(name)}?force=1`,
      { timeout: 60000 }
    );
    expect([204, 404]).toContain(removed.status());
    containers.delete(name);
  }
}

interface IKernelSpecs {
  kernelspecs: Record<
    string,
    {
      name: string;
      spec: {
        metadata?: { gpudev?: { environment?: string; container?: string } };
      };
    }
  >;
}

interface ISession {
  path: string;
  kernel: { id: string; name: string } | null;
}

/** The name of the kernelspec of a new dev container of environment `gpu` (not a shared one). */
export async function gpuKernelName(
  request: APIRequestContext
): Promise<string> {
  const listed = await request.get('/api/kernelspecs');
  expect(listed.ok()).toBe(true);
  const body = (await listed.json()) as IKernelSpecs;
  const names = Object.values(body.kernelspecs)
    .filter(entry => {
      const gpudev = entry.spec.metadata?.gpudev;
      return gpudev?.environment === 'gpu' && gpudev.container === undefined;
    })
    .map(entry => entry.name);
  expect(names).toHaveLength(1);
  return names[0] ?? '';
}

/** The kernel named `name` of a session (a notebook's), once there is one. */
export async function sessionKernel(
  request: APIRequestContext,
  name: string
): Promise<{ id: string; name: string } | null> {
  const listed = await request.get('/api/sessions');
  expect(listed.ok()).toBe(true);
  const sessions = (await listed.json()) as ISession[];
  return (
    sessions.find(session => session.kernel?.name === name)?.kernel ?? null
  );
}

/**
 * Keep the kernel of the notebook shown busy: the test server's GPU culler
 * shuts an idle GPU kernel down after 20 s (jupyter_server_test_config.py),
 * never a busy one.
 */
export async function keepBusy(page: IJupyterLabPageFixture): Promise<void> {
  await page.evaluate(() => {
    const widget = window.jupyterapp.shell.currentWidget as unknown as {
      sessionContext: {
        session: {
          kernel: { requestExecute(content: { code: string }): unknown } | null;
        } | null;
      };
    };
    widget.sessionContext.session?.kernel?.requestExecute({
      code: 'import time\ntime.sleep(600)'
    });
  });
}
