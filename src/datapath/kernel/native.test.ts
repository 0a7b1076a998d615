import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { fstatSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { NetnsPool } from '../../../test/support/netns.js';
import { requireRoot } from '../../../test/support/root.js';
import { run } from '../../../test/support/run.js';
import { BpfObject, MAX_TEST_RUN_REPEAT, MapOfMaps, RawMap, RingBufferReader, TcxLink, attach, codec, removePinDir, unpin } from './bpf/index.js';
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

interface LoopDelay {
  /** Event-loop delay percentiles over the whole run, in ms (perf_hooks, sampled every ms). */
  p99Ms: number;
  maxMs: number;
  /** Times a 1 ms interval timer fired while the work was in flight. */
  ticks: number;
  elapsedMs: number;
  /** How long the main thread waited for a CPU meanwhile: delay that is contention, not a blocked loop. */
  cpuWaitMs: number;
}

/** Nanoseconds this (main) thread has spent runnable but waiting for a CPU (schedstat's run_delay). */
function mainThreadCpuWait(): number {
  return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ')[1]);
}

/**
 * How the event loop fared while `work` ran, with a 1 ms interval timer
 * competing for it. The histogram is read a little after the work, so a
 * call that held the loop the whole time is recorded too (its timer could
 * only fire afterwards).
 */
async function loopDelayDuring(work: () => Promise<unknown>): Promise<LoopDelay> {
  const histogram = monitorEventLoopDelay({ resolution: 1 });
  let ticks = 0;
  let counting = true;
  const timer = setInterval(() => {
    if (counting) ticks++;
  }, 1);
  histogram.enable();
  let elapsedMs: number;
  let cpuWaitMs: number;
  try {
    // The histogram records the gap between two of its samples, so a stall before its first sample goes unseen:
    // wait for it to have recorded a gap (a fixed sleep was not enough when both timers fell due in one pass).
    while (histogram.count === 0) await sleep(1);
    const start = process.hrtime.bigint();
    const waitedBefore = mainThreadCpuWait();
    try {
      await work();
    } finally {
      counting = false;
    }
    elapsedMs = Number(process.hrtime.bigint() - start) / 1e6;
    cpuWaitMs = (mainThreadCpuWait() - waitedBefore) / 1e6;
    await sleep(10);
  } finally {
    histogram.disable();
    clearInterval(timer);
  }
  assert.ok(histogram.count > 0, 'the delay histogram recorded nothing');
  return { p99Ms: histogram.percentile(99) / 1e6, maxMs: histogram.max / 1e6, ticks, elapsedMs, cpuWaitMs };
}

const describeDelay = (d: LoopDelay): string =>
  `event-loop delay p99 ${d.p99Ms.toFixed(2)} ms, max ${d.maxMs.toFixed(2)} ms; ${d.ticks} ticks of a 1 ms timer in ${d.elapsedMs.toFixed(1)} ms, ` +
  `${d.cpuWaitMs.toFixed(1)} ms of which the main thread waited for a CPU`;

/**
 * The longest stall less the time the main thread waited for a CPU: on two
 * cores shared with other test files that wait is the machine's, not the
 * addon's (a synchronous call held the loop 22–250 ms, far above the bound).
 */
const stallOfOwnMs = (d: LoopDelay): number => d.maxMs - d.cpuWaitMs;

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
    const map = await RawMap.create({ name: 'tdl_a_conf', type: 'ARRAY', keySize: 4, valueSize: 4, maxEntries: 1 });
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
    const map = await RawMap.create({ name: 'tdl_a_num', type: 'HASH', keySize: 4, valueSize: 4, maxEntries: 4 });
    cleanups.push(() => map.close());
    const bpf = rawBpf();
    const key = Buffer.alloc(4);
    for (const flags of [2 ** 32, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '0']) {
      assert.throws(() => bpf.mapLookup(map.handle(), key, flags), TypeError, `flags ${String(flags)}`);
    }
    // Bad arguments throw at once, before any work is queued.
    assert.throws(() => bpf.mapCreate({ name: 'tdl_a_neg', type: 1, keySize: -4, valueSize: 4, maxEntries: 1 }), TypeError);
    // ifindex 2^32 + 1 wrapped to 1: the program went onto the namespace's loopback.
    assert.throws(() => bpf.tcxAttach(obj.program('tdl_count_v1').handle(), 2 ** 32 + 1, 46, 0, ns.path), TypeError);
    assert.throws(() => rawNetlink().netlinkOpen(null, 0, 2.5), TypeError);
    await assert.rejects(Netlink.open({ timeoutMs: 2.5 }), RangeError);
    await assert.rejects(NetlinkSocket.open({ protocol: 32 }), RangeError);
  });

  it('takes an empty batch (an array with no data pointer) and refuses a withValues that is not a boolean', async () => {
    const map = await RawMap.create({ name: 'tdl_a_empty', type: 'HASH', keySize: 4, valueSize: 4, maxEntries: 4 });
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

  it('creates a preallocated 1M-entry hash map off the event loop', async (t) => {
    // BPF_MAP_CREATE allocates and links every element up front: 20 to 250 ms of kernel time on this machine.
    // Three in a row, so about a hundred delay samples make the p99 mean something.
    const held: number[] = [];
    const delay = await loopDelayDuring(async () => {
      for (let i = 0; i < 3; i++) {
        let pending!: Promise<RawMap>;
        held.push(timed(() => (pending = RawMap.create({ name: 'tdl_a_big', type: 'HASH', keySize: 4, valueSize: 8, maxEntries: 1 << 20 }))));
        const map = await pending;
        try {
          assert.equal(map.info.maxEntries, 1 << 20);
        } finally {
          map.close();
        }
      }
    });
    t.diagnostic(`create() held the loop for ${held.map((x) => x.toFixed(3)).join(' ')} ms; ${describeDelay(delay)}`);
    assert.ok(Math.min(...held) < 2, `create() held the event loop for ${held.map((x) => x.toFixed(2)).join(', ')} ms`);
    assert.ok(delay.ticks >= delay.elapsedMs / 10, `the loop kept turning: ${describeDelay(delay)}`);
    // Alone on a quiet machine the p99 is 2 to 5 ms. Beside another test file, ASan's above all, single delays reach
    // 15 to 60 ms: the kernel fills the map for up to ~20 ms without yielding its CPU (PREEMPT_NONE), the other
    // process has the other CPU, and the main thread waits for one (30 to 50 ms of runqueue wait per run; contention,
    // not a blocked loop). The bounds leave room for that, the longest stall less the main thread's own wait for a CPU
    // (a full run of the suites once held it 1 s of 1.8 s); the held times above are what a synchronous create fails.
    // The p99 means something only while the main thread mostly had a CPU: a full run once kept it waiting 935 ms
    // of 1,308 (p99 142 ms, all of it runqueue); the longest stall less that wait is bounded either way.
    if (delay.cpuWaitMs < delay.elapsedMs / 4) assert.ok(delay.p99Ms < 50, describeDelay(delay));
    assert.ok(stallOfOwnMs(delay) < 100, describeDelay(delay));
  });

  it('writes and deletes elements of maps of maps off the event loop', async (t) => {
    // The kernel ends each such write with synchronize_rcu(): 4 to 40 ms that held the event loop before.
    const template = await RawMap.create({ name: 'tdl_a_tmpl', type: 'ARRAY', keySize: 4, valueSize: 8, maxEntries: 1 });
    cleanups.push(() => template.close());
    const held: number[] = [];
    const took: number[] = [];
    const op = async (call: () => Promise<unknown>): Promise<void> => {
      const start = process.hrtime.bigint();
      let pending!: Promise<unknown>;
      held.push(timed(() => (pending = call())));
      await pending;
      took.push(Number(process.hrtime.bigint() - start) / 1e6);
    };
    const delay = await loopDelayDuring(async () => {
      for (const type of ['HASH_OF_MAPS', 'ARRAY_OF_MAPS'] as const) {
        const outer = await MapOfMaps.create({ name: 'tdl_a_outer', type, maxEntries: 4, innerMap: template }, codec.u32);
        try {
          for (let i = 0; i < 3; i++) {
            await op(() => outer.set(i, template));
            assert.equal(outer.innerMapId(i), template.info.id);
            await op(() => outer.delete(i));
            assert.equal(outer.has(i), false);
          }
        } finally {
          outer.close();
        }
      }
    });
    const ms = (xs: number[]): string => xs.map((x) => x.toFixed(2)).join(' ');
    t.diagnostic(`calls held the loop for ${ms(held)} ms; each took ${ms(took)} ms to settle; ${describeDelay(delay)}`);
    // The fastest hold is the measure, so one preemption of this thread on a busy machine cannot fail it.
    assert.ok(Math.min(...held) < 2, `held the event loop for ${ms(held)} ms`);
    assert.ok(stallOfOwnMs(delay) < 50, describeDelay(delay));
  });

  it('detaches tcx links off the event loop, through TcxLink and through an Attachment', async (t) => {
    // BPF_LINK_DETACH of a tcx link waits for an RCU grace period: 3 to 16 ms on this machine.
    const prog = obj.program('tdl_count_v1');
    const held: number[] = [];
    const delay = await loopDelayDuring(async () => {
      for (let i = 0; i < 3; i++) {
        const link = await TcxLink.attach(prog, 1, 'ingress', { netns: ns.path });
        try {
          let pending!: Promise<void>;
          held.push(timed(() => (pending = link.detach())));
          await pending;
          assert.equal(link.info().ifindex, 0, 'the link is detached');
        } finally {
          link.close();
        }
        const at = await attach({ ifindex: 1, direction: 'egress', program: prog, netns: ns.path, mode: 'tcx' });
        let pending!: Promise<void>;
        held.push(timed(() => (pending = at.detach())));
        await pending;
      }
    });
    const nl = await Netlink.open({ netns: ns.path });
    try {
      assert.deepEqual(await nl.listBpfFilters(1, 'egress'), [], 'no tc filter either');
    } finally {
      await nl.close();
    }
    t.diagnostic(`detach() held the loop for ${held.map((x) => x.toFixed(3)).join(' ')} ms; ${describeDelay(delay)}`);
    assert.ok(Math.min(...held) < 2, `detach() held the event loop for ${held.map((x) => x.toFixed(2)).join(', ')} ms`);
    assert.ok(stallOfOwnMs(delay) < 50, describeDelay(delay));
  });

  it('caps the repetitions of a test run, which hold a pool thread until done', async () => {
    const prog = obj.program('tdl_count_v1');
    // A frame that is not IPv4: the program counts it and returns, so a million runs stay short.
    const frame = Buffer.alloc(14);
    await assert.rejects(prog.testRun({ data: frame, repeat: MAX_TEST_RUN_REPEAT + 1 }), RangeError);
    await assert.rejects(prog.testRun({ data: frame, repeat: 0 }), RangeError);
    // Cast to int, 2^31 was a negative count for the kernel; 2^32 - 1 kept a pool thread for minutes.
    for (const repeat of [2 ** 31, 2 ** 32 - 1, MAX_TEST_RUN_REPEAT + 1]) {
      assert.throws(() => rawBpf().progTestRun(prog.handle(), { data: frame, dataOutSize: 64, repeat, flags: 0 }), RangeError, String(repeat));
    }
    const r = await prog.testRun({ data: frame, repeat: MAX_TEST_RUN_REPEAT });
    assert.equal(r.retval, 0);
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
      // Killed by the test; the timer only ends an orphan. Long enough for a test slowed by the sanitizers beside other work.
      setTimeout(() => process.exit(0), 30000);
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
      // Before, the thread only looked at stop() once the ring ran dry: here, not until the producer quit.
      await Promise.race([stop, new Promise((r) => setTimeout(r, 3000))]);
      assert.ok(stopped, `stop() had not settled ${Date.now() - start} ms later, with the producer still running`);
      assert.equal(producer.exitCode, null, 'the producer was still running when stop() settled');
    } finally {
      producer.kill('SIGKILL');
      if (!stopped) await reader.stop();
    }
  });
});
