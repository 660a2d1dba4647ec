/** Headless Debian chromium through playwright-core, for the dashboard's browser tests. */
import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';

/** Where Debian's `chromium` package puts the browser. */
export const CHROMIUM = '/usr/bin/chromium';

/** A `skip` option for tests that need it: false when installed, else the reason. */
export const chromiumSkip: false | string = existsSync(CHROMIUM)
  ? false
  : `${CHROMIUM} is missing: install it with \`apt-get install -y chromium\` (.ci/run does)`;

/** Launches headless chromium without a sandbox, GPU or background traffic. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
}
