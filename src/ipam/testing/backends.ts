import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openBackend } from '../../kvstore/factory.js';
import type { Backend } from '../../kvstore/types.js';
import { createLogger } from '../../logging/logger.js';

export interface TestBackend {
  backend: Backend;
  /** Opens another handle on the same state (an agent restart; the embedded store is closed first by the caller). */
  reopen(): Promise<Backend>;
  cleanup(): Promise<void>;
}

const quiet = createLogger('ipam-test', 'error');

/** Embedded store in a fresh temp dir. `synchronous=normal`: durability across power loss is not what these tests prove. */
export async function embeddedBackend(): Promise<TestBackend> {
  const dir = mkdtempSync(join(tmpdir(), 'tendril-ipam-'));
  const open = () => openBackend({ kind: 'embedded', options: { 'embedded.path': join(dir, 'kv.db'), 'embedded.synchronous': 'normal' }, dataDir: dir, logger: quiet });
  return {
    backend: await open(),
    reopen: open,
    cleanup: async () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** A client of a running etcd whose IPAM keys are wiped first, so every subject starts empty. */
export async function etcdBackend(endpoint: string): Promise<TestBackend> {
  const open = () => openBackend({ kind: 'etcd', options: { 'etcd.endpoints': endpoint }, dataDir: tmpdir(), logger: quiet });
  const backend = await open();
  await backend.deletePrefix('tendril/ipam/');
  return { backend, reopen: open, cleanup: async () => undefined };
}
