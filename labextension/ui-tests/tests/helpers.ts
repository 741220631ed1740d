import { expect } from '@jupyterlab/galata';
import type { IJupyterLabPageFixture } from '@jupyterlab/galata';

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
