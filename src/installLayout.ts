import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Where tendril is installed: the directory holding its package.json (the
 * repository, or /opt/tendril in the image), beside build/ (the eBPF objects,
 * the kernel addon), api/ and dist/. Found by walking up from this module
 * rather than by a fixed `../..`, because the same code runs from different
 * depths: compiled one module per file (dist/src/<subsystem>/) under the
 * tests, and bundled into a few files (dist/bundle/) behind bin/.
 */
export interface InstalledPackage {
  root: string;
  version: string;
}

let found: InstalledPackage | undefined;

export function installedPackage(): InstalledPackage {
  if (found) return found;
  const start = dirname(fileURLToPath(import.meta.url));
  for (let dir = start; ; dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (existsSync(file)) {
      const pkg = JSON.parse(readFileSync(file, 'utf8')) as { name?: unknown; version?: unknown };
      if (pkg.name === 'tendril') {
        if (typeof pkg.version !== 'string') throw new Error(`${file} has no version`);
        found = { root: dir, version: pkg.version };
        return found;
      }
    }
    if (dirname(dir) === dir) throw new Error(`tendril's package.json is not in ${start} nor in any directory above it`);
  }
}

/** A path inside the installation, e.g. installPath('build', 'bpf'). */
export function installPath(...parts: string[]): string {
  return join(installedPackage().root, ...parts);
}
