// Conntrack GC of a big table against the agent's hot path: an agent with a
// 1M-entry TCP conntrack table (filled through its pin), one GC pass over it
// half expired (wall time, and the agent's CPU time: the walk runs in the
// kernel, on the agent's libuv pool thread), then CNI ADD latency p50/p99 of
// pods added one after the other while GC passes run back to back over the
// full table, beside the same ADDs with no GC running. Rounds alternate.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { BpfMap } from '../src/datapath/kernel/bpf/index.js';
import { MIN_CT_GC_INTERVAL_MS } from '../src/datapath/bpf/conntrackGc.js';
import { MapName } from '../src/datapath/bpf/constants.js';
import { ct4Key, ctEntry, type CtEntryValue } from '../src/datapath/bpf/layout.js';
import { parseIp } from '../src/netip/index.js';
import { BenchNamespaces, TendrilBenchNode } from './policyDatapath.js';
import { percentile } from './stats.js';

const TABLE = 1 << 20;
const ADDS_PER_ROUND = 20;
const ROUNDS = 3;

export interface CtGcReport {
  entries: number;
  passMs: number;
  passCpuMs: number;
  removed: number;
  idle: { p50: number; p99: number; n: number };
  /** GC passes back to back over the full table: the worst case. */
  duringGc: { p50: number; p99: number; n: number };
  passesDuringAdds: number;
  /** One pass every MIN_CT_GC_INTERVAL_MS: what the GC itself does while a table is half full or more. */
  atMinInterval: { p50: number; p99: number; n: number };
}

async function cpuMs(pid: number): Promise<number> {
  const f = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  return (Number(f[11]) + Number(f[12])) * 10; // utime + stime, clock ticks of 10 ms
}

function flow(i: number, expiresNs: bigint): [ReturnType<typeof ct4Key.read>, CtEntryValue] {
  return [
    { saddr: parseIp(`10.${100 + (i >> 24)}.${(i >> 16) & 0xff}.${(i >> 8) & 0xff}`), daddr: parseIp('192.0.2.1'), sport: 1024 + (i & 0xff), dport: 443, proto: 6, flags: 0 },
    { expiresNs, packets: 1n, bytes: 60n, srcIdentity: 1000, dstIdentity: 2, srcEndpoint: 0, dstEndpoint: 0, revNatIndex: 0, tcpFlags: 0x12, flags: 1, backendId: 0, natAddr: parseIp('0.0.0.0'), natPort: 0 },
  ];
}

async function fill(map: BpfMap<ReturnType<typeof ct4Key.read>, CtEntryValue>, expiredEvery: number): Promise<void> {
  const now = process.hrtime.bigint();
  const batch: Array<[ReturnType<typeof ct4Key.read>, CtEntryValue]> = [];
  for (let i = 0; i < TABLE; i++) {
    batch.push(flow(i, expiredEvery > 0 && i % expiredEvery === 0 ? now - 1n : now + 3600_000_000_000n));
    if (batch.length === 65536) await map.setMany(batch.splice(0));
  }
  if (batch.length > 0) await map.setMany(batch);
}

export async function runCtGcBench(): Promise<CtGcReport> {
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-ctgc-'));
  const namespaces = new BenchNamespaces();
  const node = `tdlctgc${process.pid}`;
  let agent: TendrilBenchNode | undefined;
  try {
    await namespaces.add(node);
    agent = await TendrilBenchNode.start(node, join(scratch, 'state'), '10.251.0.0/20', ['--bpf-ct-tcp-max', String(TABLE)]);
    const ct = BpfMap.openPinned(join(agent.bpffsRoot, 'tendril', MapName.CT_TCP), ct4Key, ctEntry);
    const pid = agent.process.pid!;
    try {
      await fill(ct, 2);
      const cpu0 = await cpuMs(pid);
      const t0 = performance.now();
      const first = await agent.client.gcBpfConntrack();
      const passMs = performance.now() - t0;
      const passCpuMs = (await cpuMs(pid)) - cpu0;
      await fill(ct, 0);

      const idle: number[] = [];
      const during: number[] = [];
      const paced: number[] = [];
      let passes = 0;
      let podNo = 0;
      const addSeries = async (out: number[]) => {
        for (let i = 0; i < ADDS_PER_ROUND; i++) {
          const ns = `tdlctgcp${podNo++}`;
          await namespaces.add(ns);
          const t = performance.now();
          await agent!.addPod(`p${podNo}`, ns, 'app=ctgc');
          out.push(performance.now() - t);
        }
      };
      const withGc = async (out: number[], pauseMs: number) => {
        let stop = false;
        const gcLoop = (async () => {
          while (!stop) {
            await agent!.client.gcBpfConntrack();
            passes++;
            if (pauseMs > 0) await new Promise((res) => setTimeout(res, pauseMs));
          }
        })();
        try {
          await addSeries(out);
        } finally {
          stop = true;
          await gcLoop;
        }
      };
      for (let r = 0; r < ROUNDS; r++) {
        await agent.waitIdle();
        await addSeries(idle);
        await withGc(during, 0);
        await withGc(paced, MIN_CT_GC_INTERVAL_MS);
      }
      const sum = (xs: number[]) => ({ p50: percentile(xs, 0.5), p99: percentile(xs, 0.99), n: xs.length });
      return { entries: TABLE, passMs, passCpuMs, removed: first.tcp.removed, idle: sum(idle), duringGc: sum(during), passesDuringAdds: passes, atMinInterval: sum(paced) };
    } finally {
      ct.close();
    }
  } finally {
    if (agent) await agent.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  }
}

export function printCtGc(r: CtGcReport): void {
  console.log(`\nConntrack GC of a ${r.entries.toLocaleString('en')}-entry TCP table (the BPF program, run by the agent on its libuv pool)`);
  console.log(`  one pass, half expired: ${r.passMs.toFixed(0)} ms wall, agent CPU ${r.passCpuMs} ms, ${r.removed.toLocaleString('en')} removed`);
  console.log(`  CNI ADD, pods one after the other (${r.idle.n} each side, ${r.passesDuringAdds} GC passes over the full table meanwhile):`);
  console.log(`    idle:              p50 ${r.idle.p50.toFixed(1)} ms  p99 ${r.idle.p99.toFixed(1)} ms`);
  console.log(`    GC back to back:   p50 ${r.duringGc.p50.toFixed(1)} ms  p99 ${r.duringGc.p99.toFixed(1)} ms   p99 ratio ${(r.duringGc.p99 / r.idle.p99).toFixed(2)}x`);
  console.log(`    GC every ${MIN_CT_GC_INTERVAL_MS / 1000} s (its pace for a half-full table): p50 ${r.atMinInterval.p50.toFixed(1)} ms  p99 ${r.atMinInterval.p99.toFixed(1)} ms   p99 ratio ${(r.atMinInterval.p99 / r.idle.p99).toFixed(2)}x`);
}
