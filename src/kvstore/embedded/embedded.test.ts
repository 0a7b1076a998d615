import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLogger } from '../../logging/logger.js';
import { recordWatch, rejectsWithCode, runBackendContract } from '../contract.js';
import { KvstoreErrorCode } from '../errors.js';
import { openBackend } from '../factory.js';
import { runChild, waitForLine } from '../testing/childProcess.js';
import { writerValue } from '../testing/writerValue.js';
import { EmbeddedBackend, type EmbeddedOptions } from './embeddedBackend.js';
import { EMBEDDED_DEFAULTS } from './embeddedOptions.js';

const logger = createLogger('kvstore-test', 'warn');
const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tendril-kv-'));
  dirs.push(d);
  return d;
}

function open(path: string, extra: Partial<EmbeddedOptions> = {}): EmbeddedBackend {
  return EmbeddedBackend.open({ ...EMBEDDED_DEFAULTS, path, logger, ...extra });
}

runBackendContract('embedded', async () => {
  const stateDir = tempDir();
  const backend = await openBackend({ kind: 'embedded', options: {}, dataDir: stateDir, logger });
  return { backend };
});

describe('embedded store: one writer', () => {
  it('a second process opening the same store gets KVSTORE_LOCKED naming the holder', async () => {
    const path = join(tempDir(), 'kv.db');
    const kv = open(path);
    try {
      const run = runChild(['open', path]);
      const line = await waitForLine(run, (l) => l.startsWith('{'));
      const res = JSON.parse(line) as { code?: string; message?: string };
      assert.equal(res.code, KvstoreErrorCode.LOCKED);
      assert.match(res.message ?? '', new RegExp(`pid ${process.pid}`));
      assert.equal((await run.exited).code, 0);
    } finally {
      await kv.close();
    }
  });

  it('a second open in the same process is refused too', async () => {
    const path = join(tempDir(), 'kv.db');
    const kv = open(path);
    try {
      assert.throws(() => open(path), (err: { code?: string }) => err.code === KvstoreErrorCode.LOCKED);
    } finally {
      await kv.close();
    }
    const again = open(path);
    await again.close();
  });

  it('the lock of a SIGKILLed holder is gone: the next agent opens at once', async () => {
    const path = join(tempDir(), 'kv.db');
    const holder = runChild(['hold', path]);
    await waitForLine(holder, (l) => l === 'ready');
    await rejectsWithCode(() => open(path), KvstoreErrorCode.LOCKED);
    holder.child.kill('SIGKILL');
    await holder.exited;
    assert.ok(existsSync(`${path}.pid`), 'the stale pid note is left behind');
    const kv = open(path);
    await kv.put('after', 'crash');
    await kv.close();
    assert.ok(!existsSync(`${path}.pid`), 'a clean close removes the pid note');
  });
});

describe('embedded store: group commit', () => {
  it('concurrent writes share a commit but keep one revision each, in call order; a failing one fails alone', async () => {
    const kv = open(join(tempDir(), 'kv.db'));
    try {
      const rec = recordWatch(kv, 'g/');
      const start = (await kv.status()).revision;
      const calls = Array.from({ length: 20 }, (_, i) =>
        i === 7 ? kv.put('g/bad', 'x', { lease: '999999' }) : kv.put(`g/${String(i).padStart(2, '0')}`, String(i)),
      );
      const settled = await Promise.allSettled(calls);
      const bad = settled[7];
      assert.equal(bad?.status, 'rejected');
      assert.equal((bad as PromiseRejectedResult).reason.code, KvstoreErrorCode.LEASE_NOT_FOUND);
      const revisions = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value.revision] : []));
      assert.deepEqual(revisions, Array.from({ length: 19 }, (_, i) => start + 1 + i));
      const events = await rec.waitForEvents(19);
      assert.deepEqual(events.map((e) => e.modRevision), revisions);
      assert.equal(await kv.get('g/bad'), undefined);
    } finally {
      await kv.close();
    }
  });

  it('close commits writes that were accepted but not yet flushed', async () => {
    const path = join(tempDir(), 'kv.db');
    const kv = open(path);
    const pending = kv.put('late', 'write');
    await kv.close();
    assert.ok((await pending).revision > 0);
    const again = open(path);
    assert.equal((await again.get('late'))?.value, 'write');
    await again.close();
  });
});

describe('embedded store: persistence', () => {
  it('keeps revisions and history across reopen, so a watch resumes after a restart', async () => {
    const path = join(tempDir(), 'kv.db');
    let kv = open(path);
    const rec = recordWatch(kv, 'w/');
    await kv.put('w/a', '1');
    await kv.put('w/b', '2');
    await rec.waitForEvents(2);
    const resume = rec.watch.nextRevision;
    await kv.close();

    kv = open(path);
    await kv.put('w/c', '3');
    await kv.delete('w/a');
    const again = recordWatch(kv, 'w/', { fromRevision: resume });
    const events = await again.waitForEvents(2);
    await sleep(50);
    assert.deepEqual(again.events.map((e) => [e.type, e.key, e.modRevision]), [
      ['put', 'w/c', resume],
      ['delete', 'w/a', resume + 1],
    ]);
    assert.equal(events.length, 2);
    assert.equal((await kv.status()).revision, resume + 1);
    await kv.close();
  });

  it('leases outlive a restart, and one that expired while closed ends on open', async () => {
    const path = join(tempDir(), 'kv.db');
    let kv = open(path);
    const short = await kv.grantLease(1);
    const long = await kv.grantLease(600);
    await kv.put('l/short', 'x', { lease: short.id });
    const before = await kv.put('l/long', 'y', { lease: long.id });
    await kv.close();
    await sleep(1100);
    // A long lease-check interval: only the sweep on open can have removed the key.
    kv = open(path, { leaseCheckIntervalMs: 60_000 });
    assert.equal(await kv.get('l/short'), undefined);
    assert.equal((await kv.get('l/long'))?.value, 'y');
    assert.ok((await kv.keepAlive(long.id)) === 600);
    const rec = recordWatch(kv, 'l/', { fromRevision: before.revision + 1 });
    assert.deepEqual((await rec.waitForEvents(1)).map((e) => [e.type, e.key]), [['delete', 'l/short']]);
    await kv.close();
  });

  it('compacts history automatically beyond historyRevisions', async () => {
    const path = join(tempDir(), 'kv.db');
    const kv = open(path, { historyRevisions: 50, leaseCheckIntervalMs: 20 });
    for (let i = 0; i < 100; i++) await kv.put('c/k', String(i));
    await sleep(100);
    const rec = recordWatch(kv, 'c/', { fromRevision: 2 });
    const err = await rec.waitForError();
    assert.equal((err as { code?: string }).code, KvstoreErrorCode.COMPACTED);
    const recent = recordWatch(kv, 'c/', { fromRevision: (await kv.status()).revision - 10 });
    assert.equal((await recent.waitForEvents(11)).length, 11);
    await kv.close();
  });
});

describe('embedded store: crash safety', () => {
  it('every acknowledged write survives SIGKILL at random points and the file stays sound', async () => {
    const path = join(tempDir(), 'kv.db');
    const acked = new Set<number>();
    let next = 0;
    const rounds = 8;
    for (let round = 0; round < rounds; round++) {
      const run = runChild(['writer', path, String(next)]);
      // Round 0 is killed during start-up (open, schema creation); the others mid-stream.
      if (round > 0) await waitForLine(run, (l) => l.startsWith('ack '));
      await sleep(round === 0 ? 40 : 20 + Math.floor(Math.random() * 180));
      run.child.kill('SIGKILL');
      const { signal, stderr } = await run.exited;
      assert.equal(signal, 'SIGKILL', `writer died on its own: ${stderr}`);
      for (const line of run.lines) {
        const m = /^ack (\d+)$/.exec(line);
        if (m) acked.add(Number(m[1]));
      }
      const kv = open(path);
      try {
        assert.equal(kv.integrityCheck(), 'ok');
        for (const i of acked) {
          const got = await kv.get(`k/${i}`);
          assert.equal(got?.value, writerValue(i), `acknowledged write k/${i} lost after round ${round}`);
        }
        // Revisions never go backwards and are dense in the log.
        const st = await kv.status();
        assert.ok(st.revision >= acked.size);
      } finally {
        await kv.close();
      }
      next = acked.size === 0 ? next : Math.max(...acked) + 1;
    }
    assert.ok(acked.size > 20, `only ${acked.size} writes were acknowledged; the test proved little`);
  });
});
