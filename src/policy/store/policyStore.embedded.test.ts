import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { embeddedStore, testLogger } from '../../identity/testing/cluster.js';
import { openBackend } from '../../kvstore/factory.js';
import { ownClientOf, runPolicyStoreSuite } from './testing/storeSuite.js';

runPolicyStoreSuite('embedded', embeddedStore, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tendril-policy-store-'));
  return ownClientOf(
    () => openBackend({ kind: 'embedded', options: { 'embedded.synchronous': 'normal' }, dataDir: dir, logger: testLogger }),
    () => rmSync(dir, { recursive: true, force: true }),
  );
});
