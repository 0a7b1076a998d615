// A store file SQLite cannot use must stop the agent with one line that names
// the file and the fix, not SQLite's bare "file is not a database".
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { createLogger } from '../../logging/logger.js';
import { KvstoreError, KvstoreErrorCode } from '../errors.js';
import { EmbeddedBackend, type EmbeddedOptions } from './embeddedBackend.js';
import { EMBEDDED_DEFAULTS } from './embeddedOptions.js';

const logger = createLogger('kvstore-test', 'silent');
const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tempPath(): string {
  const d = mkdtempSync(join(tmpdir(), 'tdl-kvopen-'));
  dirs.push(d);
  return join(d, 'tendril.db');
}

function open(path: string): EmbeddedBackend {
  return EmbeddedBackend.open({ ...EMBEDDED_DEFAULTS, journal: 'delete', path, logger } satisfies EmbeddedOptions);
}

function assertDiagnosis(path: string, err: unknown): true {
  assert.ok(err instanceof KvstoreError, String(err));
  assert.equal(err.code, KvstoreErrorCode.CORRUPT);
  assert.ok(!err.message.includes('\n'), 'one line');
  assert.ok(err.message.startsWith(`embedded kvstore at ${path} `), err.message);
  assert.match(err.message, /move it aside .* to start with an empty store .* or restore it from a backup$/);
  return true;
}

describe('embedded store that cannot be opened', () => {
  it('garbage: not a SQLite database, with the fix', () => {
    const path = tempPath();
    writeFileSync(path, Buffer.alloc(8192, 0x5a));
    assert.throws(() => open(path), (err) => assertDiagnosis(path, err) && /not a SQLite database/.test((err as Error).message));
  });

  it('a directory at the path: said so, with the fix', () => {
    const path = tempPath();
    mkdirSync(path);
    assert.throws(() => open(path), (err) => assertDiagnosis(path, err) && /is a directory, not a SQLite database/.test((err as Error).message));
  });

  it('a database whose pages were overwritten: damaged, with the fix; nothing is left locked', async () => {
    const path = tempPath();
    await open(path).close();
    // Keep SQLite's header (the file still looks like a database) and wreck the schema page behind it.
    const fd = openSync(path, 'r+');
    writeSync(fd, Buffer.alloc(4096, 0xa5), 0, 4096, 100);
    closeSync(fd);
    assert.throws(() => open(path), (err) => assertDiagnosis(path, err));
    // The same path opens again once the file is moved aside: the lock went with the failed handle.
    rmSync(path);
    await open(path).close();
  });
});
