import { expect, test } from '@jupyterlab/galata';

import { openPanel, shot } from './helpers';

/**
 * The commit dialog by keyboard, with a snapshot and its progress, in the
 * dark theme and at a narrow width. The `web` environment (CPU only, the
 * kernel image) is started through the API; the changes are made in the
 * container's terminal.
 */
const ENV = 'web';

interface IStarted {
  name: string;
  state: string;
}

/** Relative luminance (0 black .. 1 white) of a CSS `rgb(...)` colour. */
function luminance(color: string): number {
  const [r, g, b] = (color.match(/[\d.]+/g) ?? ['0', '0', '0'])
    .slice(0, 3)
    .map(Number)
    .map(c => c / 255)
    .map(c => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

test.describe('GPU Dev: the commit dialog', () => {
  // The container's terminal is not one the page made through /api/terminals:
  // Galata's mock of that list must be off.
  test.use({ terminals: null });

  let name = '';

  test.afterEach(async ({ page }) => {
    if (name) {
      await page.request.delete(
        `/gpudev/api/containers/${encodeURIComponent(name)}?force=1`
      );
      name = '';
    }
  });

  test('keyboard, selection, snapshot progress, dark theme, narrow width', async ({
    page
  }, testInfo) => {
    test.setTimeout(240_000);
    // Given a running container of the web environment, started as the page's user
    const started = await page.request.post('/gpudev/api/containers', {
      data: { environment: ENV }
    });
    expect(started.ok()).toBe(true);
    name = ((await started.json()) as IStarted).name;
    const panel = await openPanel(page);
    const row = panel.getByTestId(`gpudev-container-${name}`);
    await expect(row).toHaveAttribute('data-state', 'running', {
      timeout: 30_000
    });

    // And two files written and one deleted in its terminal
    await row.getByTestId(`gpudev-container-terminal-${name}`).click();
    const terminal = page.locator('.jp-Terminal').last();
    await expect(terminal).toBeVisible({ timeout: 30_000 });
    await terminal.click();
    await page.keyboard.type(
      `[ "$(hostname)" = "${name.slice(0, 63)}" ] && echo on > /etc/gpudev-ui.conf && echo data > /opt/gpudev-ui.txt && rm /etc/issue\n`
    );
    await expect(
      row.getByTestId(`gpudev-container-uncommitted-${name}`)
    ).toBeVisible({ timeout: 60_000 });

    // When the user opens the commit dialog with the keyboard
    const commitButton = row.getByTestId(`gpudev-container-commit-${name}`);
    await commitButton.focus();
    await page.keyboard.press('Enter');
    const dialog = page.getByTestId('gpudev-commit');
    const conf = dialog.getByTestId('gpudev-change-file:/etc/gpudev-ui.conf');
    const txt = dialog.getByTestId('gpudev-change-file:/opt/gpudev-ui.txt');
    const issue = dialog.getByTestId('gpudev-change-delete:/etc/issue');
    // Then each change has its checkbox, all checked, and the diff has them
    await expect(conf).toBeVisible({ timeout: 60_000 });
    await expect(txt).toBeVisible();
    await expect(issue).toBeVisible();
    const diff = dialog.getByTestId('gpudev-commit-diff');
    await expect(diff).toContainText('/etc/issue');

    // When the deletion is left out with the keyboard (Space on its checkbox)
    await issue.getByRole('checkbox').focus();
    await page.keyboard.press('Space');
    // Then the diff no longer deletes it, and still copies the files
    await expect(issue.getByRole('checkbox')).not.toBeChecked();
    await expect(diff).not.toContainText('/etc/issue', { timeout: 30_000 });
    await expect(diff).toContainText('COPY');
    await shot(page, testInfo, '01-selection');

    // When they commit a snapshot only (the Dockerfile is not written)
    await dialog.getByTestId('gpudev-commit-write').uncheck();
    const tag = `gpudev-ui-snapshot:${Date.now()}`;
    await dialog.getByTestId('gpudev-commit-snapshot').fill(tag);
    await expect(dialog.getByTestId('gpudev-commit-push')).toBeEnabled();
    await dialog.getByTestId('gpudev-commit-run').click();
    // Then its progress is shown, then the snapshot's tag
    await expect(dialog.getByTestId('gpudev-commit-log')).toContainText(
      'committing',
      { timeout: 60_000 }
    );
    await expect(dialog.getByTestId('gpudev-commit-snapshot-ref')).toHaveText(
      tag,
      { timeout: 120_000 }
    );
    await expect(dialog.getByTestId('gpudev-commit-written')).toHaveText(
      'not written'
    );
    await shot(page, testInfo, '02-snapshot');

    // When the dark theme is chosen, the dialog follows it
    await page.theme.setDarkTheme();
    const background = await page
      .locator('.jp-gpudev-commit-panel')
      .evaluate(node => getComputedStyle(node).backgroundColor);
    const text = await page
      .locator('.jp-gpudev-commit-panel')
      .evaluate(node => getComputedStyle(node).color);
    expect(luminance(background)).toBeLessThan(0.1);
    expect(luminance(text)).toBeGreaterThan(0.4);
    await shot(page, testInfo, '03-dark');
    await page.theme.setLightTheme();

    // When the window is narrow, the diff goes below the changes
    await page.setViewportSize({ width: 700, height: 900 });
    await expect
      .poll(async () => {
        const changes = await dialog
          .locator('.jp-gpudev-commit-changes')
          .boundingBox();
        const below = await dialog
          .locator('.jp-gpudev-commit-diff')
          .boundingBox();
        return (
          changes !== null &&
          below !== null &&
          below.y >= changes.y + changes.height
        );
      })
      .toBe(true);
    // And nothing in the dialog is wider than it
    const overflow = await page
      .locator('.jp-gpudev-commit')
      .evaluate(node => node.scrollWidth - node.clientWidth);
    expect(overflow).toBeLessThanOrEqual(1);
    await shot(page, testInfo, '04-narrow');
  });
});
