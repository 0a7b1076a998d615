import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { requireRoot } from '../../../../test/support/root.js';
import { decode, u32, u64 } from './codec.js';
import { BpfObject } from './object.js';
import { RingBufferReader } from './ringbuf.js';
import { KERNEL_TEST_OBJECT, eventCodec } from './testing/kernelTest.js';
import { ipv4Packet, ipv4String } from './testing/packets.js';

requireRoot('the ring buffer tests');

/** Resolves once `cond` holds, polling on timers (so the event loop must be free to run them). */
async function waitFor(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('ring buffer reader', () => {
  let obj: BpfObject;
  const readers: RingBufferReader[] = [];

  before(async () => {
    obj = await BpfObject.load(KERNEL_TEST_OBJECT);
  });

  after(async () => {
    for (const r of readers) await r.stop();
    obj?.close();
  });

  /** Reads and drops what earlier tests left in the ring, so a test counts only its own records. */
  async function drainRing(): Promise<void> {
    const drain = RingBufferReader.open(obj.rawMap('tdl_events'), () => undefined);
    await new Promise((r) => setTimeout(r, 50));
    await drain.stop();
  }

  it('delivers the program\'s events to JavaScript in order, off the event loop', async () => {
    const events: Array<ReturnType<typeof eventCodec.read>> = [];
    const reader = RingBufferReader.open(obj.rawMap('tdl_events'), (records) => {
      for (const r of records) events.push(decode(eventCodec, r));
    });
    readers.push(reader);
    const packet = ipv4Packet({ src: '10.66.0.1', dst: '10.66.0.2', payloadLength: 30 });
    await obj.program('tdl_count_v1').testRun({ data: packet, repeat: 100 });
    await waitFor(() => events.length >= 100, '100 events');
    assert.equal(events.length, 100);
    for (const e of events) {
      assert.equal(ipv4String(e.saddr), '10.66.0.1');
      assert.equal(ipv4String(e.daddr), '10.66.0.2');
      assert.equal(e.len, packet.length);
      assert.equal(e.variant, 1);
    }
    const stats = reader.stats();
    assert.equal(stats.records, 100);
    assert.ok(stats.batches >= 1 && stats.batches <= 100);
    assert.equal(stats.oversized, 0);
    await reader.stop();
  });

  it('keeps the event loop responsive while records pour in', async (t) => {
    let received = 0;
    const reader = RingBufferReader.open(obj.rawMap('tdl_events'), (records) => {
      received += records.length;
    });
    readers.push(reader);
    const delay = monitorEventLoopDelay({ resolution: 1 });
    delay.enable();
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    try {
      const prog = obj.program('tdl_count_v2');
      const packet = ipv4Packet({ src: '10.66.1.1', dst: '10.66.1.2' });
      // 20 runs of 2000 packets: more than the 64 KiB ring holds at once, so the reader drains while they run.
      for (let i = 0; i < 20; i++) await prog.testRun({ data: packet, repeat: 2000 });
      await waitFor(() => reader.stats().records === received && received > 0, 'the queued batches');
      await new Promise((r) => setTimeout(r, 50));
    } finally {
      clearInterval(timer);
      delay.disable();
    }
    assert.ok(received > 2000, `received ${received} records`);
    assert.ok(ticks > 10, `a 1 ms timer ran ${ticks} times meanwhile`);
    const maxMs = delay.max / 1e6;
    t.diagnostic(`${received} records in ${reader.stats().batches} batches; 1 ms timer ran ${ticks} times; event loop delay max ${maxMs.toFixed(1)} ms, p99 ${(delay.percentile(99) / 1e6).toFixed(1)} ms`);
    assert.ok(maxMs < 200, `the event loop was blocked for ${maxMs.toFixed(1)} ms at most`);
    await reader.stop();
  });

  it('stops: the promise settles once the thread is gone, and later events are not delivered', async () => {
    let received = 0;
    const reader = RingBufferReader.open(obj.rawMap('tdl_events'), (records) => {
      received += records.length;
    });
    const stopped = reader.stop();
    assert.equal(reader.stop(), stopped, 'stop() is idempotent');
    await stopped;
    await obj.program('tdl_count_v1').testRun({ data: ipv4Packet({ src: '10.66.2.1', dst: '10.66.2.2' }), repeat: 5 });
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(received, 0);
  });

  it('with coalesceMs, records that come one by one are delivered in few batches, and stop() does not wait out the pause', async () => {
    await drainRing();
    let received = 0;
    const reader = RingBufferReader.open(obj.rawMap('tdl_events'), (records) => (received += records.length), { coalesceMs: 200 });
    readers.push(reader);
    const packet = ipv4Packet({ src: '10.66.6.1', dst: '10.66.6.2' });
    // 40 records a few milliseconds apart: read one at a time, each would be a batch of its own.
    for (let i = 0; i < 40; i++) {
      await obj.program('tdl_count_v1').testRun({ data: packet });
      await new Promise((r) => setTimeout(r, 2));
    }
    await waitFor(() => received === 40, '40 events');
    const { batches } = reader.stats();
    assert.ok(batches <= 5, `40 records in ${batches} batches`);
    const started = Date.now();
    await reader.stop();
    assert.ok(Date.now() - started < 150, `stop() took ${Date.now() - started} ms`);
    assert.throws(() => RingBufferReader.open(obj.rawMap('tdl_events'), () => undefined, { coalesceMs: 1001 }), /coalesceMs must be at most 1000/);
  });

  it('drops records longer than maxRecordSize and counts them', async () => {
    await drainRing();
    let received = 0;
    const reader = RingBufferReader.open(obj.rawMap('tdl_events'), (records) => (received += records.length), { maxRecordSize: 8 });
    readers.push(reader);
    await obj.program('tdl_count_v1').testRun({ data: ipv4Packet({ src: '10.66.3.1', dst: '10.66.3.2' }), repeat: 7 });
    await waitFor(() => reader.stats().oversized === 7, '7 oversized records');
    assert.equal(received, 0);
    await reader.stop();
  });

  it('hands listener exceptions to onError', async () => {
    const errors: unknown[] = [];
    const reader = RingBufferReader.open(
      obj.rawMap('tdl_events'),
      () => {
        throw new Error('listener failed');
      },
      { onError: (err) => errors.push(err) },
    );
    readers.push(reader);
    await obj.program('tdl_count_v1').testRun({ data: ipv4Packet({ src: '10.66.4.1', dst: '10.66.4.2' }) });
    await waitFor(() => errors.length > 0, 'the listener error');
    assert.match(String(errors[0]), /listener failed/);
    await reader.stop();
  });

  it('keeps running when the caller drops its reference', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    let received = 0;
    const weak = new WeakRef(RingBufferReader.open(obj.rawMap('tdl_events'), (records) => (received += records.length)));
    for (let i = 0; i < 3; i++) {
      gc();
      await new Promise((r) => setImmediate(r));
    }
    const reader = weak.deref();
    assert.ok(reader, 'a running reader is not collected');
    readers.push(reader);
    await obj.program('tdl_count_v1').testRun({ data: ipv4Packet({ src: '10.66.5.1', dst: '10.66.5.2' }), repeat: 4 });
    await waitFor(() => received === 4, '4 events');
    await reader.stop();
  });

  it('refuses maps that are not ring buffers', () => {
    assert.throws(() => RingBufferReader.open(obj.rawMap('tdl_count'), () => undefined), /tdl_count is not a ring buffer/);
    assert.throws(() => RingBufferReader.open(obj.map('tdl_variant', u32, u64), () => undefined), /tdl_variant is not a ring buffer/);
  });

  it('lets the process exit with a reader running (unref, and teardown of a referenced one)', () => {
    const dist = fileURLToPath(new URL('.', import.meta.url));
    for (const keepAlive of [false, true]) {
      const script = `
        import { BpfObject, RingBufferReader } from ${JSON.stringify(dist + 'index.js')};
        const obj = await BpfObject.load(${JSON.stringify(KERNEL_TEST_OBJECT)});
        RingBufferReader.open(obj.rawMap('tdl_events'), () => {}, { keepAlive: ${keepAlive} });
        ${keepAlive ? 'setTimeout(() => process.exit(0), 50);' : ''}
      `;
      const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { timeout: 10_000, encoding: 'utf8' });
      assert.equal(r.error, undefined, `keepAlive ${keepAlive}: ${String(r.error)}`);
      assert.equal(r.status, 0, `keepAlive ${keepAlive}: ${r.stderr}`);
    }
  });
});
