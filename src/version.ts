import { readFileSync } from 'node:fs';

/**
 * tendril's version, from the repository's package.json (read once, on first
 * use): the one place it is written, so the agent, the CLI and the API agree.
 * From dist/src/ (where this runs) package.json is two levels up.
 */
let cached: string | undefined;

export function tendrilVersion(): string {
  if (cached === undefined) {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: unknown };
    if (typeof pkg.version !== 'string') throw new Error('package.json has no version');
    cached = pkg.version;
  }
  return cached;
}
