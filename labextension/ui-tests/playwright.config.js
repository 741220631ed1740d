/**
 * Playwright configuration for the Galata UI tests of the GPU Dev panel.
 *
 * Run from the repository root with
 *   npx playwright test --config labextension/ui-tests/playwright.config.js
 * The JupyterLab server is started from this folder (see webServer).
 */
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

module.exports = {
  ...baseConfig,
  testDir: './tests',
  outputDir: 'test-results',
  retries: process.env.CI ? 1 : 0,
  reporter: [
    ['list'],
    ['html', { open: 'never', outputFolder: 'playwright-report' }]
  ],
  use: {
    ...baseConfig.use,
    baseURL: 'http://localhost:8888',
    screenshot: 'on',
    trace: 'retain-on-failure',
    // Video needs Playwright's own ffmpeg download, which these machines cannot fetch.
    video: 'off',
    launchOptions: {
      executablePath: '/usr/bin/chromium',
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync'
      ]
    }
  },
  webServer: {
    command: 'jupyter lab --config jupyter_server_test_config.py',
    url: 'http://localhost:8888/lab',
    timeout: 120000,
    reuseExistingServer: !process.env.CI
  }
};
