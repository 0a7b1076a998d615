// Cross-node request/response latency against the underlay, one run: the
// boxes of cluster-throughput (the underlay's node namespaces; a tendril
// cluster in native routing and one in tunnel routing, client pod on node 0,
// server pod on node 1), the policy benchmarks' TCP worker on both ends (the
// same client code everywhere). Two shapes, as netperf names them: TCP_RR (a
// 1-byte request and its answer, again and again on one connection: the path's
// round trip) and TCP_CRR (connect, request, answer, close: conntrack and policy
// for a new flow each time). Every round runs each path's RR then CRR, the
// paths interleaved (every other round reversed); p50/p99 over all rounds.
import { CLUSTER_PATHS, type ClusterPath, crossNodePaths, errorLine, withCleanup } from './clusterCommon.js';
import { TcpClientSession, startTcpServer } from './policyDatapath.js';
import { pinNamespaceProcesses } from './serviceCommon.js';
import { percentile } from './stats.js';

const PORT = 8080;

export interface LatencyPath {
  rrUs: number[];
  crrUs: number[];
  crrErrors: number;
  error?: string;
}

export interface ClusterLatencyReport {
  msPerSample: number;
  rounds: number;
  paths: Record<ClusterPath, LatencyPath>;
  setupMs: number;
}

interface RrResult {
  latenciesUs: number[];
}
interface CrrResult {
  latenciesUs: number[];
  errors: number;
}

/** A session command bounded in time: a connection that never opens (a dropped SYN) would hang the session for minutes. */
async function bounded<T>(ms: number, x: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('no answer within 10 s')), ms + 10_000)));
  try {
    return await Promise.race([x, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export async function runClusterLatencyBench(msPerSample = 700, rounds = 3, pin = true): Promise<ClusterLatencyReport> {
  return withCleanup(async (onCleanup) => {
    const t0 = performance.now();
    const paths = {} as Record<ClusterPath, LatencyPath>;
    const ends = {} as Partial<Record<ClusterPath, { session: TcpClientSession; ip: string }>>;
    const stopAll: Array<() => void> = [];
    onCleanup(async () => stopAll.forEach((s) => s()));

    const built = await crossNodePaths('clat', onCleanup);
    // The workers go first at cleanup (before their namespaces).
    onCleanup(async () => stopAll.forEach((s) => s()));
    for (const name of CLUSTER_PATHS) {
      const e = built[name];
      paths[name] = { rrUs: [], crrUs: [], crrErrors: 0, ...(e.error ? { error: e.error } : {}) };
      if (e.error) continue;
      try {
        const server = await startTcpServer(e.serverNs, e.serverIp, PORT);
        stopAll.push(server.stop);
        const session = TcpClientSession.start(e.clientNs);
        stopAll.push(() => session.stop());
        // A short warm-up (neighbours resolved, the client's session surely started), then every
        // path's client on CPU 0 and server on CPU 1 (only the worker runs in these namespaces).
        await bounded(50, session.run<RrResult>({ op: 'rr', ip: e.serverIp, port: PORT, ms: 50 }));
        if (pin) {
          await pinNamespaceProcesses(e.clientNs, 0);
          await pinNamespaceProcesses(e.serverNs, 1);
        }
        ends[name] = { session, ip: e.serverIp };
      } catch (err) {
        paths[name].error = `set-up: ${errorLine(err)}`;
      }
    }
    const setupMs = performance.now() - t0;

    const measure = async (name: ClusterPath) => {
      const p = paths[name];
      const end = ends[name];
      if (p.error || !end) return;
      try {
        const rr = await bounded(msPerSample, end.session.run<RrResult>({ op: 'rr', ip: end.ip, port: PORT, ms: msPerSample }));
        p.rrUs.push(...rr.latenciesUs);
        const crr = await bounded(msPerSample, end.session.run<CrrResult>({ op: 'crr', ip: end.ip, port: PORT, ms: msPerSample, concurrency: 1 }));
        p.crrUs.push(...crr.latenciesUs);
        p.crrErrors += crr.errors;
      } catch (err) {
        p.error = errorLine(err);
      }
    };
    for (let i = 0; i < rounds; i++) for (const name of i % 2 === 0 ? CLUSTER_PATHS : [...CLUSTER_PATHS].reverse()) await measure(name);
    return { msPerSample, rounds, paths, setupMs };
  });
}

export function printClusterLatency(r: ClusterLatencyReport): void {
  const q = (xs: number[], p: number) => (xs.length ? percentile(xs, p) : undefined);
  const us = (x: number | undefined) => (x === undefined ? '    n/a' : x.toFixed(0).padStart(7));
  const ratio = (x: number | undefined, ref: number | undefined) => (x === undefined || ref === undefined ? '  n/a' : `${(x / ref).toFixed(2)}x`.padStart(5));
  const u = r.paths.underlay;
  const names: Record<ClusterPath, string> = { underlay: 'underlay (node → node)', native: 'native routing (pod → pod)', tunnel: 'tunnel, VXLAN (pod → pod)', tunnel6: 'tunnel, VXLAN over IPv6' };
  console.log(`\nCross-node request/response latency (µs), pod on node 0 → pod on node 1, vs the underlay (node namespace → node namespace, no tendril); ${r.rounds} interleaved rounds of ${r.msPerSample} ms per shape`);
  console.log(`  ${''.padEnd(28)} ${'RR p50'.padStart(7)} ${'p99'.padStart(7)} ${'p50/u'.padStart(5)} ${'p99/u'.padStart(5)}   ${'CRR p50'.padStart(7)} ${'p99'.padStart(7)} ${'p50/u'.padStart(5)} ${'p99/u'.padStart(5)}   samples RR/CRR`);
  for (const name of CLUSTER_PATHS) {
    const p = r.paths[name];
    const [rr50, rr99, crr50, crr99] = [q(p.rrUs, 0.5), q(p.rrUs, 0.99), q(p.crrUs, 0.5), q(p.crrUs, 0.99)];
    console.log(
      `  ${names[name].padEnd(28)} ${us(rr50)} ${us(rr99)} ${ratio(rr50, q(u.rrUs, 0.5))} ${ratio(rr99, q(u.rrUs, 0.99))}   ${us(crr50)} ${us(crr99)} ${ratio(crr50, q(u.crrUs, 0.5))} ${ratio(crr99, q(u.crrUs, 0.99))}   ${p.rrUs.length}/${p.crrUs.length}${p.crrErrors ? ` (${p.crrErrors} CRR errors)` : ''}${p.error ? ` — FAILED: ${p.error}` : ''}`,
    );
  }
  console.log(`  (RR: 1-byte request/answer on one connection; CRR: connect, request, answer, close; /u: ratio to the underlay; set-up ${(r.setupMs / 1000).toFixed(1)} s)`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printClusterLatency(await runClusterLatencyBench(Number(process.argv[2] ?? 700), Number(process.argv[3] ?? 3), process.argv[4] !== 'unpinned'));
}
