import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { SERVICE_QUARANTINE_DIR, SERVICE_RECORD_VERSION, ServiceStore, type StoredService } from './serviceStore.js';

describe('ServiceStore', () => {
  test('a record of the wrong shape is moved aside with the reason; good ones load', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tdl-svcstore-'));
    try {
      const store = new ServiceStore(dir);
      const good: StoredService = { version: SERVICE_RECORD_VERSION, id: 1, spec: {}, backendIds: { '10.0.0.1:80/TCP': 3 }, local: [] };
      await store.save(good);
      await writeFile(join(dir, '2.json'), JSON.stringify({ ...good, id: 2, backendIds: { '10.0.0.2:80/TCP': 'three' } }));
      await writeFile(join(dir, '3.json'), JSON.stringify({ ...good, id: 3, version: 9 }));
      await writeFile(join(dir, '4.json'), JSON.stringify({ ...good, id: 5 }));
      const loaded = await store.loadAll();
      assert.deepEqual(loaded.records, [good]);
      assert.deepEqual(
        loaded.problems.map((p) => p.error),
        ['backendIds.10.0.0.2:80/TCP "three": Invalid input: expected number, received string', 'version 9: unknown record version', 'record of service 5 in the file of service 4'],
      );
      assert.equal((await readdir(join(dir, SERVICE_QUARANTINE_DIR))).length, 3);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
