import { expect, test } from '@jupyterlab/galata';
import type { IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { APIRequestContext } from '@playwright/test';

import { removeLeftovers as removeAll } from './helpers';

/**
 * Outputs of gpudev kernels render untrusted
 * (`c.GPUDevApp.untrusted_kernel_outputs`, on in jupyter_server_test_config.py
 * as in shared mode): a kernel in a container, which runs whatever its image
 * and its pip packages put there, cannot run script in the user's Lab.
 *
 * The kernel is one of the `outputs` environment (no GPU, the kernel image
 * gpudev-python:bookworm, which has no ipywidgets: the safe outputs checked
 * here are printed text, sanitised HTML, Markdown and a PNG image).
 */

/** Starting a kernel makes its container first. */
const KERNEL_START_TIMEOUT = 120000;

/** The notebook the tests write. */
const NOTEBOOK = 'untrusted-outputs.ipynb';

/** Ids of the kernels the tests started, shut down after each. */
const startedKernels = new Set<string>();

/** Names of the containers the tests made, removed again after each. */
const madeContainers = new Set<string>();

/**
 * What a hostile output runs if Lab lets it: it leaves a marker, renames the
 * page and opens a terminal on the server (in single-user mode: a shell next
 * to the Docker socket) with the page's own credentials. `HOW` names the way
 * in, so a failure says which one ran.
 */
const ATTACK_JS = `(function () {
  window.__gpudevPwned = (window.__gpudevPwned || []).concat(['HOW']);
  document.title = 'pwned';
  var config = JSON.parse(document.getElementById('jupyter-config-data').textContent);
  var xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || '';
  fetch(config.baseUrl + 'api/terminals', {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'X-XSRFToken': xsrf, Authorization: 'token ' + config.token }
  });
})();`;

/** A 1x1 PNG image. */
const PNG =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

/**
 * A cell whose outputs try every way JupyterLab runs script (JavaScript, a
 * script tag and an onerror handler in HTML, raw HTML in Markdown), then
 * safe outputs that must still show.
 */
const HOSTILE_CELL = [
  'import html',
  'from base64 import b64decode',
  'from IPython.display import HTML, Image, Javascript, Markdown, display',
  `ATTACK = ${JSON.stringify(ATTACK_JS)}`,
  'def attack(how):',
  "    return ATTACK.replace('HOW', how)",
  'def onerror(how):',
  `    return '<img src="gpudev-missing.png" onerror="' + html.escape(attack(how)) + '">'`,
  "display(Javascript(attack('javascript')))",
  "display(HTML('<b>gpudev-html-ok</b><script>' + attack('html-script') + '</script>'))",
  "display(HTML(onerror('html-onerror')))",
  "display(Markdown('**gpudev-markdown-ok** ' + onerror('markdown-onerror')))",
  `display(Image(data=b64decode('${PNG}')))`,
  "print('gpudev-print-ok')"
].join('\n');

/** The same ways in, as one HTML output: for a kernel whose outputs stay trusted. */
const TRUSTED_CELL = [
  'from IPython.display import HTML, display',
  `display(HTML('<b>python3-html-ok</b><script>' + ${JSON.stringify(
    ATTACK_JS
  )}.replace('HOW', 'python3') + '</script>'))`
].join('\n');

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

interface IKernelInfo {
  container: string;
}

/** The name of the kernelspec of a new dev container of environment `outputs`. */
async function outputsKernelName(request: APIRequestContext): Promise<string> {
  const names = async (): Promise<string[]> => {
    const listed = await request.get('/api/kernelspecs');
    expect(listed.ok()).toBe(true);
    const body = (await listed.json()) as IKernelSpecs;
    return Object.values(body.kernelspecs)
      .filter(entry => {
        const gpudev = entry.spec.metadata?.gpudev;
        return (
          gpudev?.environment === 'outputs' && gpudev.container === undefined
        );
      })
      .map(entry => entry.name);
  };
  await expect.poll(names, { timeout: 30000 }).toHaveLength(1);
  return (await names())[0] ?? '';
}

/** The kernel named `name` of a session, once there is one. */
async function sessionKernel(
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
 * Wait for the gpudev kernel named `name` of a session to run in its
 * container; both are removed after the test.
 */
async function adoptKernel(
  request: APIRequestContext,
  name: string
): Promise<void> {
  await expect
    .poll(async () => (await sessionKernel(request, name))?.id, {
      timeout: KERNEL_START_TIMEOUT
    })
    .toBeTruthy();
  const kernelId = (await sessionKernel(request, name))?.id ?? '';
  startedKernels.add(kernelId);
  const url = `/gpudev/api/kernels/${encodeURIComponent(kernelId)}`;
  await expect
    .poll(async () => (await request.get(url)).status(), {
      timeout: KERNEL_START_TIMEOUT
    })
    .toBe(200);
  const info = (await (await request.get(url)).json()) as IKernelInfo;
  madeContainers.add(info.container);
}

/** The names of the server's Jupyter terminals. */
async function terminalNames(request: APIRequestContext): Promise<string[]> {
  const listed = await request.get('/api/terminals');
  expect(listed.ok()).toBe(true);
  return ((await listed.json()) as { name: string }[]).map(t => t.name);
}

/** The marker the attack leaves (undefined while nothing ran). */
async function pwned(page: IJupyterLabPageFixture): Promise<unknown> {
  return page.evaluate(
    () => (window as unknown as { __gpudevPwned?: string[] }).__gpudevPwned
  );
}

/** Put `source` in the first cell of the notebook shown, and run it. */
async function runFirstCell(
  page: IJupyterLabPageFixture,
  source: string
): Promise<void> {
  await page.evaluate(text => {
    const panel = window.jupyterapp.shell.currentWidget as unknown as {
      content: {
        widgets: { model: { sharedModel: { setSource(s: string): void } } }[];
      };
    };
    panel.content.widgets[0]?.model.sharedModel.setSource(text);
  }, source);
  await page.notebook.runCell(0, { wait: false });
}

/** The output area of the first cell of the notebook shown. */
function firstOutput(page: IJupyterLabPageFixture) {
  return page
    .locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')
    .first()
    .locator('.jp-OutputArea');
}

/** Wait for the attack's last chance to run: the onerror of a missing image, a fetch. */
async function settle(page: IJupyterLabPageFixture): Promise<void> {
  await page.waitForTimeout(3000);
}

test.describe('Outputs of gpudev kernels', () => {
  test.setTimeout(240000);
  // Galata's kernels fixture answers 404 for kernels it did not see start;
  // its terminals fixture lists only the terminals it saw made. Both are
  // asked through the API here.
  test.use({ kernels: null, terminals: null });

  /** The terminals there were before a test: any other one, its attack opened. */
  let terminalsBefore: string[] = [];

  test.beforeEach(async ({ page }) => {
    terminalsBefore = await terminalNames(page.request);
  });

  test.afterEach(async ({ page }) => {
    for (const name of await terminalNames(page.request)) {
      if (!terminalsBefore.includes(name)) {
        await page.request.delete(`/api/terminals/${encodeURIComponent(name)}`);
      }
    }
    await removeAll(page.request, startedKernels, madeContainers);
  });

  test('render untrusted: no script runs, safe outputs show, also once re-opened', async ({
    page
  }, testInfo) => {
    // Given a notebook whose kernel is a new dev container of `outputs`
    const kernelName = await outputsKernelName(page.request);
    expect(
      await page.notebook.createNew(NOTEBOOK, { kernel: kernelName })
    ).toBeTruthy();
    await adoptKernel(page.request, kernelName);

    // When the kernel outputs JavaScript, HTML with a script and an onerror
    // handler, Markdown with raw HTML, an image and printed text
    await runFirstCell(page, HOSTILE_CELL);
    const output = firstOutput(page);
    await expect(output).toContainText('gpudev-print-ok', {
      timeout: KERNEL_START_TIMEOUT
    });
    await settle(page);
    await page.screenshot({ path: testInfo.outputPath('untrusted.png') });

    // Then none of the script ran: no marker, the title is Lab's, no terminal
    expect(await pwned(page)).toBeUndefined();
    expect(await page.title()).not.toBe('pwned');
    expect(await terminalNames(page.request)).toEqual(terminalsBefore);
    // And the safe outputs show: printed text, the HTML's text (sanitised),
    // the Markdown rendered, the image; the JavaScript as its text
    await expect(output).toContainText('gpudev-html-ok');
    await expect(
      output.locator('.jp-RenderedMarkdown strong', {
        hasText: 'gpudev-markdown-ok'
      })
    ).toBeVisible();
    await expect(output.locator('.jp-RenderedImage img')).toHaveCount(1);
    await expect(output).toContainText('IPython.core.display.Javascript');
    await expect(output.locator('script')).toHaveCount(0);
    await expect(output.locator('[onerror]')).toHaveCount(0);

    // When the notebook is saved, closed and opened again
    expect(await page.notebook.save()).toBe(true);
    expect(await page.notebook.close(false)).toBe(true);
    expect(await page.notebook.openByPath(NOTEBOOK)).toBe(true);
    await expect(firstOutput(page)).toContainText('gpudev-print-ok');
    await settle(page);

    // Then its outputs are still untrusted: nothing ran
    expect(await pwned(page)).toBeUndefined();
    expect(await terminalNames(page.request)).toEqual(terminalsBefore);
    await expect(firstOutput(page)).toContainText('gpudev-html-ok');
  });

  test('render untrusted in a console too', async ({ page }) => {
    // Given a console whose kernel is a new dev container of `outputs`
    const kernelName = await outputsKernelName(page.request);
    await page.evaluate(async name => {
      await window.jupyterapp.commands.execute('console:create', {
        kernelPreference: { name }
      });
    }, kernelName);
    await adoptKernel(page.request, kernelName);
    const console = page.locator('.jp-CodeConsole:visible');
    await expect(console).toHaveCount(1);

    // When the kernel outputs the same hostile and safe outputs, run as
    // Shift+Enter runs a console's prompt
    await page.evaluate(async source => {
      const panel = window.jupyterapp.shell.currentWidget as unknown as {
        console: {
          promptCell: {
            model: { sharedModel: { setSource(s: string): void } };
          } | null;
        };
      };
      panel.console.promptCell?.model.sharedModel.setSource(source);
      await window.jupyterapp.commands.execute('console:run-unforced');
    }, HOSTILE_CELL);
    // (the cells run are in its content; its prompt below has an output area too)
    const output = console
      .locator('.jp-CodeConsole-content .jp-OutputArea')
      .first();
    await expect(output).toContainText('gpudev-print-ok', {
      timeout: KERNEL_START_TIMEOUT
    });
    await settle(page);

    // Then none of the script ran, and the safe outputs show
    expect(await pwned(page)).toBeUndefined();
    expect(await terminalNames(page.request)).toEqual(terminalsBefore);
    await expect(output).toContainText('gpudev-html-ok');
    await expect(
      output.locator('.jp-RenderedMarkdown strong', {
        hasText: 'gpudev-markdown-ok'
      })
    ).toBeVisible();
    await expect(output.locator('.jp-RenderedImage img')).toHaveCount(1);
    await expect(output.locator('script')).toHaveCount(0);
  });

  test('a python3 kernel is not a gpudev kernel: its outputs stay trusted', async ({
    page
  }) => {
    // Given a notebook with a python3 kernel
    expect(
      await page.notebook.createNew(undefined, { kernel: 'python3' })
    ).toBeTruthy();
    await expect
      .poll(async () => (await sessionKernel(page.request, 'python3'))?.id)
      .toBeTruthy();
    startedKernels.add(
      (await sessionKernel(page.request, 'python3'))?.id ?? ''
    );

    // When it outputs HTML with a script (which only leaves the marker here:
    // the attack's terminal is shut down after the test)
    await runFirstCell(page, TRUSTED_CELL);
    await expect(firstOutput(page)).toContainText('python3-html-ok', {
      timeout: 60000
    });

    // Then the script ran, as JupyterLab runs trusted outputs: the setting
    // is about kernels in containers only
    await expect.poll(() => pwned(page)).toEqual(['python3']);
  });
});
