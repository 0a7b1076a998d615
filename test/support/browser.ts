/**
 * Debian's Chromium, headless, driven by playwright-core (no browser
 * download): the flags keep it off the network this machine does not have.
 * Each launch runs on a fresh profile (playwright makes a new user data
 * folder per launch and removes it at close).
 */
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Browser, chromium } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

export function chromiumMissing(): string | undefined {
  return existsSync(CHROMIUM) ? undefined : `${CHROMIUM} is missing: \`make deps\` installs Debian's chromium`;
}

/**
 * Chromium, in the network namespace `netns` when given (a page served on a
 * test node's loopback): playwright drives it over a pipe, which crosses
 * namespaces, so only the browser's own connections move there.
 */
export async function launchChromium(opts: { netns?: string } = {}): Promise<Browser> {
  const missing = chromiumMissing();
  if (missing !== undefined) throw new Error(missing);
  let wrapperDir: string | undefined;
  let executablePath = CHROMIUM;
  if (opts.netns !== undefined) {
    if (!/^[A-Za-z0-9_.-]+$/.test(opts.netns)) throw new Error(`not a netns name: ${opts.netns}`);
    wrapperDir = await mkdtemp(join(tmpdir(), 'tdl-chromium-'));
    executablePath = join(wrapperDir, 'chromium');
    await writeFile(executablePath, `#!/bin/sh\nexec nsenter --net=/var/run/netns/${opts.netns} -- ${CHROMIUM} "$@"\n`);
    await chmod(executablePath, 0o755);
  }
  try {
    const browser = await chromium.launch({
      executablePath,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    if (wrapperDir !== undefined) {
      const dir = wrapperDir;
      browser.on('disconnected', () => void rm(dir, { recursive: true, force: true }));
    }
    return browser;
  } catch (err) {
    if (wrapperDir !== undefined) await rm(wrapperDir, { recursive: true, force: true });
    throw err;
  }
}
