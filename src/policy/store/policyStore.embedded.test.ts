import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { embeddedStore, testLogger } from '../../identity/testing/cluster.js';
import { openBackend } from '../../kvstore/factory.js';
import type { Backend } from '../../kvstore/types.js';
import { runPolicyStoreSuite } from './testing/storeSuite.js';

runPolicyStoreSuite('embedded', embeddedStore, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tendril-policy-store-'));
  const open = () => openBackend({ kind: 'embedded', options: { 'embedded.synchronous': 'normal' }, dataDir: dir, logger: testLogger });
  const opened: Backend[] = [await open()];
  return {
    backend: opened[0]!,
    reopen: async () => {
      const b = await open();
      opened.push(b);
      return b;
    },
    cleanup: async () => {
      for (const b of opened) await b.close().catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
