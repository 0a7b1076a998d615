/**
 * Debian's Chromium, headless, driven by playwright-core (no browser
 * download): the flags keep it off the network this machine does not have.
 * Each launch runs on a fresh profile (playwright makes a new user data
 * folder per launch and removes it at close).
 */
import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

export function chromiumMissing(): string | undefined {
  return existsSync(CHROMIUM) ? undefined : `${CHROMIUM} is missing: \`make deps\` installs Debian's chromium`;
}

export async function launchChromium(): Promise<Browser> {
  const missing = chromiumMissing();
  if (missing !== undefined) throw new Error(missing);
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}
