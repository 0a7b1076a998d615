import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { fstatSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';
import { run } from '../../../test/support/run.js';
import { BpfObject, RawMap, RingBufferReader, TcxLink, removePinDir, unpin } from './bpf/index.js';
import { type NativeBpf, nativeBpf } from './bpf/native.js';
import { KERNEL_TEST_OBJECT, makePinRoot } from './bpf/testing/kernelTest.js';
import { ipv4Packet } from './bpf/testing/packets.js';
import { KernelError } from './errors.js';
import { loadAddon } from './native.js';
import { Netlink, NetlinkSocket } from './netlink/index.js';

requireRoot('the kernel addon boundary tests');

/**
 * The addon's boundary as JavaScript can misuse it: wrong handles, strings
 * and numbers C would misread, calls that could stall the event loop. Each
 * test here failed (or crashed, or hung) before the fix it guards.
 */

/** The raw netlink functions, called with what their typed wrappers would never pass. */
interface RawNetlinkAddon {
  netlinkOpen(netns: unknown, protocol: unknown, timeoutMs: unknown): Promise<unknown>;
  netlinkRequest(handle: unknown, bytes: unknown, first: unknown, last: unknown): Promise<Buffer>;
  netlinkClose(handle: unknown): void;
}
const rawNetlink = (): RawNetlinkAddon => loadAddon() as RawNetlinkAddon;
/** The bpf functions with their argument types erased, for the same purpose. */
const rawBpf = (): Record<keyof NativeBpf, (...args: unknown[]) => unknown> => nativeBpf() as unknown as Record<keyof NativeBpf, (...args: unknown[]) => unknown>;

/** Milliseconds a synchronous call kept the event loop. */
function timed(fn: () => void): number {
  const start = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - start) / 1e6;
}

describe('kernel addon boundary', () => {
  const pool = new NetnsPool('addon');
  let ns: { name: string; path: string };
  let obj: BpfObject;
  let tmp: string;
  const cleanups: Array<() => unknown> = [];

  before(async () => {
    ns = await pool.add('a');
    obj = await BpfObject.load(KERNEL_TEST_OBJECT);
    tmp = await mkdtemp(join(tmpdir(), 'tdl-addon-'));
  });

  after(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
    obj?.close();
    await pool.cleanup();
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  it('refuses another kind of external where a netlink socket is expected, and leaves its fds alone', async () => {
    // A ring buffer reader read as a netlink handle had its refcount taken for an fd: close(2) of stderr, then a crash.
    const map = RawMap.create({ name: 'tdl_a_conf', type: 'ARRAY', keySize: 4, valueSize: 4, maxEntries: 1 });
    cleanups.push(() => map.close());
    const reader = nativeBpf().ringbufOpen(obj.rawMap('tdl_events').handle(), () => undefined, {});
    try {
      const nl = rawNetlink();
      const message = new Uint8Array(16);
      for (const wrong of [map.handle(), reader, {}, null]) {
        assert.throws(() => nl.netlinkClose(wrong), TypeError);
        assert.throws(() => nl.netlinkRequest(wrong, message, 1, 1), TypeError);
      }
      fstatSync(1);
      fstatSync(2);
      assert.deepEqual(map.lookup(Buffer.alloc(4)), Buffer.alloc(4), 'the map fd is still open');
    } finally {
      await nativeBpf().ringbufStop(reader);
    }
  });

  it('refuses strings with a NUL instead of handing C a shorter path than JavaScript checked', () => {
    const bpf = rawBpf();
    assert.throws(() => bpf.unpin(`${tmp}/tdl-pin\0/../other`), /must not contain NUL/);
    assert.throws(() => bpf.objGet(`${tmp}/tdl-pin\0x`, 'map'), /must not contain NUL/);
    assert.throws(() => bpf.isBpffs('/sys/fs/bpf\0x'), /must not contain NUL/);
    // Truncated, this was the agent's own namespace: the socket opened, in the wrong place.
    assert.throws(() => rawNetlink().netlinkOpen('/proc/self/ns/net\0/../../var/run/netns/x', 0, 1000), /must not contain NUL/);
  });

  it('refuses numbers that are not integers of the argument\'s range instead of wrapping them', async () => {
    const map = RawMap.create({ name: 'tdl_a_num', type: 'HASH', keySize: 4, valueSize: 4, maxEntries: 4 });
    cleanups.push(() => map.close());
    const bpf = rawBpf();
    const key = Buffer.alloc(4);
    for (const flags of [2 ** 32, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '0']) {
      assert.throws(() => bpf.mapLookup(map.handle(), key, flags), TypeError, `flags ${String(flags)}`);
    }
    assert.throws(() => bpf.mapCreate({ name: 'tdl_a_neg', type: 1, keySize: -4, valueSize: 4, maxEntries: 1 }), TypeError);
    // ifindex 2^32 + 1 wrapped to 1: the program went onto the namespace's loopback.
    assert.throws(() => bpf.tcxAttach(obj.program('tdl_count_v1').handle(), 2 ** 32 + 1, 46, 0, ns.path), TypeError);
    assert.throws(() => rawNetlink().netlinkOpen(null, 0, 2.5), TypeError);
    await assert.rejects(Netlink.open({ timeoutMs: 2.5 }), RangeError);
    await assert.rejects(NetlinkSocket.open({ protocol: 32 }), RangeError);
  });

  it('takes an empty batch (an array with no data pointer) and refuses a withValues that is not a boolean', async () => {
    const map = RawMap.create({ name: 'tdl_a_empty', type: 'HASH', keySize: 4, valueSize: 4, maxEntries: 4 });
    cleanups.push(() => map.close());
    const bpf = nativeBpf();
    // Under UBSan this was memcpy(dst, NULL, 0): an abort of the whole process.
    const r = await bpf.mapUpdateBatch(map.handle(), new Uint8Array(0), new Uint8Array(0), 0, 0);
    assert.equal(r.count, 0);
    // Returned undefined (no exception, no promise) before.
    assert.throws(() => rawBpf().mapDump(map.handle(), null, 4, undefined), /withValues must be a boolean/);
  });

  it('opens a tcx attach\'s netns path off the event loop: a FIFO there is refused, not waited on', async () => {
    const fifo = join(tmp, 'tdl-fifo');
    execFileSync('mkfifo', [fifo]);
    // Before, open(2) on the main thread waited for a writer: this child is one, 2 s late, so the old code fails rather than hangs.
    const writer: ChildProcess = spawn(process.execPath, ['-e', 'setTimeout(() => require("fs").openSync(process.argv[1], "w"), 2000)', fifo], {
      stdio: 'ignore',
    });
    cleanups.push(() => writer.kill('SIGKILL'));
    let ticks = 0;
    const timer = setInterval(() => ticks++, 5);
    try {
      let pending!: Promise<TcxLink>;
      const blockedMs = timed(() => {
        pending = TcxLink.attach(obj.program('tdl_count_v1'), 1, 'ingress', { netns: fifo });
      });
      const started = Date.now();
      await assert.rejects(pending, (err: unknown) => {
        assert.ok(err instanceof KernelError, String(err));
        assert.equal(err.code, 'EINVAL', err.message); // setns: not a namespace
        assert.match(err.operation, /^BPF_LINK_CREATE tcx ingress ifindex 1 netns /);
        return true;
      });
      assert.ok(blockedMs < 100, `tcxAttach held the event loop for ${blockedMs.toFixed(1)} ms`);
      assert.ok(Date.now() - started < 1500, 'refused at once, without waiting for a writer');
    } finally {
      clearInterval(timer);
    }
    assert.throws(() => rawBpf().tcxAttach(obj.program('tdl_count_v1').handle(), 1, 46, 0, 'relative/netns'), /absolute path/);
  });

  it('refuses a FIFO as an ELF object instead of parking a pool thread on it', async () => {
    const fifo = join(tmp, 'tdl-obj-fifo');
    execFileSync('mkfifo', [fifo]);
    // libbpf's open(2) waited for a writer, holding one of libuv's four pool threads; this one comes 2 s late.
    const writer = spawn(process.execPath, ['-e', 'setTimeout(() => require("fs").openSync(process.argv[1], "w"), 2000)', fifo], { stdio: 'ignore' });
    cleanups.push(() => writer.kill('SIGKILL'));
    const started = Date.now();
    await assert.rejects(BpfObject.load(fifo), (e: unknown) => {
      assert.ok(e instanceof KernelError, String(e));
      assert.equal(e.code, 'EINVAL', e.message);
      assert.equal(e.operation, `bpf_object__open_file ${fifo}`);
      assert.equal(e.kernelMessage, 'not a regular file');
      return true;
    });
    assert.ok(Date.now() - started < 1500, `refused after ${Date.now() - started} ms`);
  });

  it('closes an attached tcx link without the kernel\'s RCU grace period on the event loop, and it still detaches', async () => {
    const linkExists = async (id: number): Promise<boolean> => (await run(['bpftool', 'link', 'show', 'id', String(id)])).code === 0;
    // The last close of an attached link detaches it and waits for synchronize_rcu(): 7 to 16 ms on this machine.
    // The fastest of three closes is the measure, so one preemption of this thread on a busy machine cannot fail it.
    const times: number[] = [];
    const ids: number[] = [];
    for (let i = 0; i < 3; i++) {
      const link = await TcxLink.attach(obj.program('tdl_count_v1'), 1, 'ingress', { netns: ns.path });
      const { id } = link.info();
      assert.ok(await linkExists(id));
      ids.push(id);
      times.push(timed(() => link.close()));
    }
    const fastest = Math.min(...times);
    assert.ok(fastest < 3, `close() held the event loop for ${times.map((t) => t.toFixed(2)).join(', ')} ms`);
    const deadline = Date.now() + 5000;
    for (const id of ids) {
      while (await linkExists(id)) {
        assert.ok(Date.now() < deadline, `link ${id} still exists 5 s after close()`);
        await new Promise((r) => setTimeout(r, 10));
      }
    }
  });

  it('stops a ring buffer reader whose ring never drains', async () => {
    // A 16 MiB ring the listener below never catches up with, so no consume ever finds fewer than a batch waiting.
    const big = await BpfObject.load(KERNEL_TEST_OBJECT, { maxEntries: { tdl_events: 1 << 24 } });
    cleanups.push(() => big.close());
    // A producer in another process, so it keeps the ring full whatever this event loop does.
    const pinRoot = await makePinRoot('addon');
    cleanups.push(() => removePinDir(pinRoot));
    const progPin = join(pinRoot, 'tdl_prog');
    big.program('tdl_count_v2').pin(progPin);
    cleanups.push(() => unpin(progPin));
    const dist = fileURLToPath(new URL('./bpf/', import.meta.url));
    const packet = Array.from(ipv4Packet({ src: '10.67.0.1', dst: '10.67.0.2' }));
    const script = `
      import { BpfProgram } from ${JSON.stringify(`${dist}index.js`)};
      const prog = BpfProgram.openPinned(${JSON.stringify(progPin)});
      const data = Uint8Array.from(${JSON.stringify(packet)});
      process.stdout.write('producing\\n');
      setTimeout(() => process.exit(0), 8000);
      for (;;) await prog.testRun({ data, repeat: 200000 });
    `;
    const producer = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    cleanups.push(() => producer.kill('SIGKILL'));

    let records = 0;
    const reader = RingBufferReader.open(big.rawMap('tdl_events'), (batch) => {
      records += batch.length;
      // A listener slower than the producer: the reader always finds a full batch waiting.
      const until = process.hrtime.bigint() + 200_000n;
      while (process.hrtime.bigint() < until);
    });
    let stopped = false;
    try {
      await new Promise<void>((resolve, reject) => {
        producer.stdout?.once('data', () => resolve());
        producer.once('exit', (code) => reject(new Error(`producer exited ${String(code)} before producing`)));
      });
      const deadline = Date.now() + 5000;
      while (records < 5000) {
        assert.ok(Date.now() < deadline, `only ${records} records arrived`);
        await new Promise((r) => setTimeout(r, 5));
      }
      const start = Date.now();
      const stop = reader.stop().then(() => (stopped = true));
      // Before, the thread only looked at stop() once the ring ran dry: here, 7 s later, after the producer quit.
      await Promise.race([stop, new Promise((r) => setTimeout(r, 3000))]);
      assert.ok(stopped, `stop() had not settled ${Date.now() - start} ms later, with the producer still running`);
      assert.equal(producer.exitCode, null, 'the producer was still running when stop() settled');
    } finally {
      producer.kill('SIGKILL');
      if (!stopped) await reader.stop();
    }
  });
});
