import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { SERVICE_DB_FILE, SERVICE_QUARANTINE_DIR, SERVICE_RECORD_VERSION, ServiceStore, type StoredService } from './serviceStore.js';

const record = (id: number, more: Partial<StoredService> = {}): StoredService => ({ version: SERVICE_RECORD_VERSION, id, spec: {}, backendIds: { [`10.0.0.${id}:80/TCP`]: id + 2 }, local: [], ...more });

describe('ServiceStore', () => {
  let dir: string;
  let store: ServiceStore;
  beforeEach(async () => {
    dir = join(await mkdtemp(join(tmpdir(), 'tdl-svcstore-')), 'services');
    store = new ServiceStore(dir);
  });
  afterEach(async () => {
    store.close();
    await rm(join(dir, '..'), { recursive: true, force: true });
  });

  test('a batch is one transaction: every record and removal lands, and a batch that fails leaves nothing of it', async () => {
    await store.commit({ save: [record(1), record(2), record(3)] });
    await store.commit({ save: [record(4), record(1, { local: ['10.0.0.1:80/TCP'] })], remove: [2] });
    assert.deepEqual((await store.loadAll()).records, [record(1, { local: ['10.0.0.1:80/TCP'] }), record(3), record(4)]);
    // A record that cannot be written (JSON has no BigInt) fails the batch after the first one was written: none of it stays.
    const unwritable = { ...record(6), backendIds: { x: 1n } } as unknown as StoredService;
    await assert.rejects(store.commit({ save: [record(5), unwritable], remove: [1] }), /BigInt/);
    assert.deepEqual((await store.loadAll()).records.map((r) => r.id), [1, 3, 4]);
    // Another store on the same directory (the agent after a restart) reads what was committed.
    const again = new ServiceStore(dir);
    assert.deepEqual((await again.loadAll()).records.map((r) => r.id), [1, 3, 4]);
    again.close();
    assert.equal((await stat(join(dir, SERVICE_DB_FILE))).mode & 0o777, 0o600);
    assert.equal((await stat(dir)).mode & 0o777, 0o700);
  });

  test('a row edited to the wrong shape is moved to quarantine with the reason; good ones load', async () => {
    const good = record(1);
    await store.save(good);
    store.putRawRecord(2, JSON.stringify({ ...record(2), backendIds: { '10.0.0.2:80/TCP': 'three' } }));
    store.putRawRecord(3, JSON.stringify({ ...record(3), version: 9 }));
    store.putRawRecord(4, JSON.stringify(record(5)));
    store.putRawRecord(6, '{"half');
    const loaded = await store.loadAll();
    assert.deepEqual(loaded.records, [good]);
    assert.deepEqual(
      loaded.problems.map((p) => p.error),
      ['backendIds.10.0.0.2:80/TCP "three": Invalid input: expected number, received string', 'version 9: unknown record version', 'record of service 5 in the row of service 4', `not JSON: ${errorOf(() => JSON.parse('{"half'))}`],
    );
    assert.match(loaded.problems[0]!.file, /services\.db \(service 2; moved to its quarantine table\)/);
    assert.deepEqual(store.quarantined().map((q) => q.serviceId), [2, 3, 4, 6]);
    // Moved, not left to fail every start.
    assert.deepEqual(await store.loadAll(), { records: [good], problems: [] });
  });

  test('a database file replaced while the agent was down (not SQLite) refuses the load with the file and the fix, and is left as it is', async () => {
    await mkdir(dir, { recursive: true });
    const garbage = Buffer.alloc(8192, 0x41);
    await writeFile(join(dir, SERVICE_DB_FILE), garbage);
    await assert.rejects(store.loadAll(), (err: unknown) => err instanceof Error && err.message.includes(join(dir, SERVICE_DB_FILE)) && /cannot be opened .*move it aside/.test(err.message));
    assert.deepEqual(await readFile(join(dir, SERVICE_DB_FILE)), garbage);
  });

  test("an older agent's record files are taken in once: good ones become rows, bad ones go to .quarantine, half-written ones go", async () => {
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, '1.json'), JSON.stringify(record(1)));
    await writeFile(join(dir, '7.json'), JSON.stringify(record(7)));
    await writeFile(join(dir, '8.json'), JSON.stringify(record(9)));
    await writeFile(join(dir, '12.json.tmp'), '{"half');
    const loaded = await store.loadAll();
    assert.deepEqual(loaded.records, [record(1), record(7)]);
    assert.deepEqual(loaded.problems.map((p) => [p.file, p.error]), [[join(dir, '8.json'), 'record of service 9 in the file of service 8']]);
    const files = (await readdir(dir)).filter((n) => !n.startsWith(SERVICE_DB_FILE));
    assert.deepEqual(files, [SERVICE_QUARANTINE_DIR]);
    assert.equal((await readdir(join(dir, SERVICE_QUARANTINE_DIR))).length, 1);
    assert.deepEqual((await store.loadAll()).records.map((r) => r.id), [1, 7]);
  });
});

function errorOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('did not throw');
}
