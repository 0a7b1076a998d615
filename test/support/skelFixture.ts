import { chmod, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The compiled skel test plugin (dist/test/fixtures/skelPlugin.js). */
export const SKEL_PLUGIN = fileURLToPath(new URL('../fixtures/skelPlugin.js', import.meta.url));

/**
 * A temporary CNI_PATH directory holding the skel test plugin under the given
 * type names, plus a scratch dir for configs and the cache.
 */
export async function makePluginDir(types: readonly string[]): Promise<{ dir: string; cleanup(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'tdl-plugins-'));
  await chmod(SKEL_PLUGIN, 0o755);
  for (const t of types) await symlink(SKEL_PLUGIN, join(dir, t));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

export async function makeScratchDir(): Promise<{ dir: string; cleanup(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'tdl-scratch-'));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}
