// How long a change made through one node takes to act on another, in a
// three-node tendril cluster on etcd (nodes A, B, C):
// - policy: an import through A's API to the change being enforced on packets at
//   C. A client pod on B probes a server pod on C (a new TCP connection every
//   millisecond, each abandoned after 50 ms: a dropped SYN is only retransmitted
//   after 1 s); the server is in default-deny ingress and each import toggles a
//   policy between allowing the probe port and allowing another. "Enforced" is
//   the start of the first attempt from which every attempt has the new outcome
//   (connects after an allow, times out after a removal) minus the moment the
//   API call returned (0: in force before it returned).
// - the revision `tendril policy get` shows: an import through A (of a policy
//   that selects no pod) until C's GET /policy reports a newer clusterRevision.
// - pod ADD: an ADD through A's CNI API to C knowing the pod's address, in C's
//   ipcache (GET /ip on C's socket, polled back to back every 2 ms) and in C's
//   datapath (C's pinned tendril_ipcache map, looked up from here every
//   millisecond: what C's programs see), each from the ADD's start and after it
//   returned. The API call, not the CLI, so no process start sits in the numbers.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ipcacheKey, ipcacheValue, type IpcacheValue } from '../src/datapath/bpf/layout.js';
import { BpfMap } from '../src/datapath/kernel/bpf/index.js';
import { hostPrefix, type IpPrefix, parseIp } from '../src/netip/index.js';
import { BenchCluster, type BenchRoutingMode, type ClusterAgent, type ClusterPod, boxTag, errorLine, withCleanup } from './clusterCommon.js';
import { ingressRuleDoc, runTcpClient, startProbe, startTcpServer } from './policyDatapath.js';
import { percentile } from './stats.js';
import { ProbeLog } from './probeLog.js';

const PORT = 8080;
/** The labels of the ADD series' pods (one identity, allocated by the first). */
export const FLEET_LABELS = 'app=prop-fleet';

export interface PolicySample {
  allow: boolean;
  /** ms from the API call returning to the first attempt of the new outcome at C (0: before it returned); undefined: not seen in 3 s. */
  enforcedMs: number | undefined;
  /** ms from the API call's start to that attempt. */
  fromStartMs: number | undefined;
  importMs: number;
}

export interface RevisionSample {
  /** ms from the import call on A returning until C's GET /policy reports a newer clusterRevision (0: already when it returned); undefined: not in 3 s. */
  seenMs: number | undefined;
  importMs: number;
  /** C's clusterRevision then equals A's. */
  equal: boolean;
}

export interface AddSample {
  addMs: number;
  /** ms from the ADD's start until C's GET /ip lists the address, and until C's pinned map holds it; undefined: not in 5 s. */
  apiFromStartMs: number | undefined;
  mapFromStartMs: number | undefined;
  /** ms from the ADD's start until A's own pinned map holds it (the reference: C's map minus this is the trip from A's datapath to C's). */
  localMapFromStartMs: number | undefined;
  /** The map poll knew the address only once the ADD returned (the address was not the one expected): its time is from then on. */
  mapLate: boolean;
}

export interface ClusterPropagationReport {
  mode: BenchRoutingMode;
  policy: PolicySample[];
  /** Why the policy series did not run or stopped. */
  policyError?: string;
  /** The revision `tendril policy get` shows: an import on A until C reports it. */
  revision: RevisionSample[];
  revisionError?: string;
  add: AddSample[];
  addError?: string;
  setupMs: number;
}


const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Imports through A (a policy no pod is selected by: no datapath work), each time until C's `GET /policy` reports a newer clusterRevision, polled every 2 ms. */
async function revisionSeries(a: ClusterAgent, c: ClusterAgent, trials: number, out: RevisionSample[]): Promise<void> {
  for (let i = 0; i < trials; i++) {
    const before = (await c.client.getPolicy()).clusterRevision;
    const t0 = performance.now();
    await a.client.putPolicy({ text: ingressRuleDoc('prop-revision', 'prop-nobody', 'prop-client', 10000 + i) });
    const returned = performance.now();
    let seenMs: number | undefined;
    let now = 0;
    for (;;) {
      now = (await c.client.getPolicy()).clusterRevision;
      if (now > before) {
        seenMs = Math.max(0, performance.now() - returned);
        break;
      }
      if (performance.now() - returned > 3000) break;
      await sleep(2);
    }
    out.push({ seenMs, importMs: returned - t0, equal: seenMs !== undefined && now === (await a.client.getPolicy()).clusterRevision });
    if (i === 3 && out.every((x) => x.seenMs === undefined)) throw new Error('C never reported a newer clusterRevision');
  }
}

async function policySeries(a: ClusterAgent, clientNs: string, serverIp: string, trials: number, out: PolicySample[]): Promise<void> {
  const probe = new ProbeLog();
  const prober = startProbe(clientNs, serverIp, PORT, probe.add);
  try {
    probe.reset(process.hrtime.bigint());
    if ((await probe.waitSettled(false, 5000)) === undefined) throw new Error('the server never became unreachable under its default-deny policy');
    let unseen = 0;
    for (let i = 0; i < trials; i++) {
      const allow = i % 2 === 0;
      const startNs = process.hrtime.bigint();
      probe.reset(startNs);
      await a.client.putPolicy({ text: ingressRuleDoc('prop-toggle', 'prop-server', 'prop-client', allow ? PORT : PORT + 1) });
      const returnedNs = process.hrtime.bigint();
      const at = await probe.waitSettled(allow, 3000);
      out.push({
        allow,
        enforcedMs: at === undefined ? undefined : Math.max(0, Number(at - returnedNs) / 1e6),
        fromStartMs: at === undefined ? undefined : Number(at - startNs) / 1e6,
        importMs: Number(returnedNs - startNs) / 1e6,
      });
      if (at === undefined) unseen++;
      // Nothing seen at all in the first imports: the path does not work, more trials would only take 3 s each.
      if (i === 3 && unseen === 4) throw new Error('no change enforced in the first 4 imports');
    }
  } finally {
    await prober.stop();
  }
}

/**
 * Pod ADDs through A's CNI API, each timed until C knows the pod (C's GET /ip,
 * C's pinned map) and until A's own map holds it: `start` adds the first pod
 * (it allocates the fleet's identity; every later ADD finds it), then each
 * `trial` adds the next. In crd mode the pods' Pod objects are made in `start`
 * (before any timing: a kubelet's ADD comes long after the scheduler's Pod).
 */
export class AddSeries {
  readonly #names: string[];
  #i = 0;
  #identity = 0;
  #last = 0n;
  #map: BpfMap<IpPrefix, IpcacheValue> | undefined;
  #localMap: BpfMap<IpPrefix, IpcacheValue> | undefined;

  constructor(
    readonly cluster: BenchCluster,
    readonly trials: number,
  ) {
    this.#names = Array.from({ length: trials + 1 }, (_, i) => `${cluster.box.tag}f${i}`);
  }

  get #a(): ClusterAgent {
    return this.cluster.agents[0]!;
  }

  get #c(): ClusterAgent {
    return this.cluster.agents[2]!;
  }

  async start(): Promise<void> {
    const a = this.#a;
    await this.cluster.box.namespaces.addBare(this.#names);
    if (a.api !== undefined) {
      for (let i = 0; i <= this.trials; i++) await a.createPodObject(`prop-fleet-${i}`, FLEET_LABELS);
      // The Pod objects reach A's pod cache (its ADD waits for its pod there).
      await sleep(500);
    }
    const warm = await a.addPod('prop-fleet-0', this.#names[0]!, FLEET_LABELS, { podObject: false });
    const identity = (await a.client.getEndpoint(`container-id:${warm.containerId}`)).identity;
    if (identity === undefined) throw new Error('the fleet pod has no identity');
    this.#identity = identity;
    this.#last = parseIp(warm.ip).bits;
    this.#map = BpfMap.openPinned(this.#c.ipcacheMapPath, ipcacheKey, ipcacheValue);
    this.#localMap = BpfMap.openPinned(a.ipcacheMapPath, ipcacheKey, ipcacheValue);
  }

  /** The next ADD; undefined when every trial ran. */
  async trial(): Promise<AddSample | undefined> {
    if (this.#i >= this.trials) return undefined;
    const i = ++this.#i;
    const [a, c, map, localMap, identity] = [this.#a, this.#c, this.#map!, this.#localMap!, this.#identity];
    const tunnel = Number(parseIp(a.node.ip).bits);
    // LPM lookups: a covering prefix answers for an address not there, so the entry must be the pod's own.
    const inMap = (ip: string) => {
      const v = map.get(hostPrefix(parseIp(ip)));
      return v !== undefined && v.identity === identity && v.tunnelIp4 === tunnel;
    };
    const inLocalMap = (ip: string) => localMap.get(hostPrefix(parseIp(ip)))?.identity === identity;
    const known = new Set((await c.client.listIpcache()).map((e) => e.prefix));
    let done = false;
    const t0 = performance.now();
    // C's API: a new /32 of A's with the fleet's identity (its address is not known before the ADD returns).
    const api = (async () => {
      while (!done) {
        const entries = await c.client.listIpcache();
        if (entries.some((e) => !known.has(e.prefix) && e.identity === identity && e.hostIP === a.node.ip)) return performance.now() - t0;
        await sleep(2);
      }
      return undefined;
    })();
    // C's map: the address IPAM hands out next (the one after the last), then the real one once known.
    let expected: string | undefined = formatV4(this.#last + 1n);
    let mapLate = false;
    const pollMap = async (has: (ip: string) => boolean) => {
      while (!done) {
        if (expected !== undefined && has(expected)) return performance.now() - t0;
        await sleep(1);
      }
      return undefined;
    };
    const mapSeen = pollMap(inMap);
    const localSeen = pollMap(inLocalMap);
    let pod: ClusterPod;
    try {
      pod = await a.addPod(`prop-fleet-${i}`, this.#names[i]!, FLEET_LABELS, { podObject: false });
    } catch (err) {
      // The pollers stop with the trial (else they would poll on after the bench).
      done = true;
      await Promise.allSettled([api, mapSeen, localSeen]);
      throw err;
    }
    const addMs = performance.now() - t0;
    if (pod.ip !== expected) {
      mapLate = true;
      expected = pod.ip;
    }
    this.#last = parseIp(pod.ip).bits;
    const timer = setTimeout(() => (done = true), 5000);
    const settled = await Promise.allSettled([api, mapSeen, localSeen]);
    clearTimeout(timer);
    done = true;
    const failed = settled.find((x): x is PromiseRejectedResult => x.status === 'rejected');
    if (failed) throw failed.reason;
    const [apiFromStartMs, mapFromStartMs, localMapFromStartMs] = settled.map((x) => (x as PromiseFulfilledResult<number | undefined>).value);
    return { addMs, apiFromStartMs, mapFromStartMs, localMapFromStartMs, mapLate };
  }

  close(): void {
    this.#map?.close();
    this.#localMap?.close();
  }
}

async function addSeries(cluster: BenchCluster, trials: number, out: AddSample[]): Promise<void> {
  const series = new AddSeries(cluster, trials);
  try {
    await series.start();
    for (let s = await series.trial(); s !== undefined; s = await series.trial()) {
      out.push(s);
      if (out.length === 3 && out.every((x) => x.apiFromStartMs === undefined && x.mapFromStartMs === undefined)) throw new Error('C never learned the first 3 pods');
    }
  } finally {
    series.close();
  }
}

const formatV4 = (bits: bigint) => [24n, 16n, 8n, 0n].map((s) => String((bits >> s) & 255n)).join('.');

export async function runClusterPropagationBench(trials = 100, mode: BenchRoutingMode = 'tunnel'): Promise<ClusterPropagationReport> {
  return withCleanup(async (onCleanup) => {
    const t0 = performance.now();
    const tag = boxTag('cp');
    const cluster = await BenchCluster.create(tag, 3, mode, onCleanup);
    const [a, b, c] = cluster.agents as [ClusterAgent, ClusterAgent, ClusterAgent];
    const [clientNs, serverNs] = [`${tag}pc`, `${tag}ps`];
    await cluster.addNamespaces(clientNs, serverNs);
    await b.addPod('prop-client', clientNs, 'app=prop-client');
    const server = await c.addPod('prop-server', serverNs, 'app=prop-server');
    const tcp = await startTcpServer(serverNs, server.ip, PORT);
    onCleanup(async () => tcp.stop());
    const setupMs = performance.now() - t0;
    const report: ClusterPropagationReport = { mode, policy: [], revision: [], add: [], setupMs };

    const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-cprop-'));
    onCleanup(() => rm(scratch, { recursive: true, force: true }));
    try {
      const reach = (await runTcpClient<{ result: string }>(clientNs, ['check', server.ip, String(PORT), '1000'])).result;
      if (reach !== 'connected') throw new Error(`the pod on B cannot reach the pod on C before any policy (${reach})`);
      // The server in default-deny ingress: a base policy that allows only a peer that does not exist.
      await a.client.putPolicy({ text: ingressRuleDoc('prop-base', 'prop-server', 'nobody', PORT) });
      await policySeries(a, clientNs, server.ip, trials, report.policy);
    } catch (err) {
      report.policyError = errorLine(err);
    }
    try {
      await revisionSeries(a, c, trials, report.revision);
    } catch (err) {
      report.revisionError = errorLine(err);
    }
    try {
      await addSeries(cluster, trials, report.add);
    } catch (err) {
      report.addError = errorLine(err);
    }
    return report;
  });
}

export function printClusterPropagation(r: ClusterPropagationReport): void {
  const f = (x: number | undefined) => (x === undefined ? '    n/a' : x.toFixed(1).padStart(7));
  const q = (xs: number[], p: number) => (xs.length ? percentile(xs, p) : undefined);
  const seen = <T>(xs: T[], get: (x: T) => number | undefined) => xs.flatMap((x) => (get(x) === undefined ? [] : [get(x)!]));
  const row = (name: string, xs: number[], n: number, extra = '') => console.log(`  ${name.padEnd(44)} ${f(q(xs, 0.5))} ${f(q(xs, 0.9))} ${f(q(xs, 0.99))}   ${String(n - xs.length).padStart(6)}   ${extra}`);
  console.log(`\nPropagation across a three-node cluster on etcd (${r.mode} routing): a change through node A, acting at node C (ms; goal p99 < 20)`);
  console.log(`  ${''.padEnd(44)} ${'p50'.padStart(7)} ${'p90'.padStart(7)} ${'p99'.padStart(7)}   unseen`);
  const enforced = seen(r.policy, (x) => x.enforcedMs);
  row(`policy import on A → enforced at C (${r.policy.length})`, enforced, r.policy.length, r.policyError ? `FAILED: ${r.policyError}` : '');
  if (r.policy.length) {
    const allow = seen(r.policy.filter((x) => x.allow), (x) => x.enforcedMs);
    const deny = seen(r.policy.filter((x) => !x.allow), (x) => x.enforcedMs);
    const imp = r.policy.map((x) => x.importMs);
    console.log(`    allow→ p50 ${f(q(allow, 0.5))}, removal→ p50 ${f(q(deny, 0.5))}; import call p50 ${f(q(imp, 0.5))}; from the call's start p50 ${f(q(seen(r.policy, (x) => x.fromStartMs), 0.5))} p99 ${f(q(seen(r.policy, (x) => x.fromStartMs), 0.99))}; in force before it returned: ${r.policy.filter((x) => x.enforcedMs === 0).length}/${r.policy.length}`);
  } else if (r.policyError) console.log(`    policy series FAILED: ${r.policyError}`);
  const rev = seen(r.revision, (x) => x.seenMs);
  row(`policy import on A → C's clusterRevision (${r.revision.length})`, rev, r.revision.length, `equal to A's then: ${r.revision.filter((x) => x.equal).length}/${r.revision.length}${r.revisionError ? `; FAILED: ${r.revisionError}` : ''}`);
  const api = seen(r.add, (x) => x.apiFromStartMs);
  const mapAll = seen(r.add, (x) => x.mapFromStartMs);
  const addMs = r.add.map((x) => x.addMs);
  const after = (xs: AddSample[], get: (x: AddSample) => number | undefined) => seen(xs, (x) => (get(x) === undefined ? undefined : Math.max(0, get(x)! - x.addMs)));
  row(`pod ADD on A → C's ipcache, GET /ip (${r.add.length})`, api, r.add.length, 'from the ADD\'s start');
  row(`pod ADD on A → C's datapath, pinned map`, mapAll, r.add.length, 'from the ADD\'s start');
  row(`  after the ADD returned: GET /ip`, after(r.add, (x) => x.apiFromStartMs), r.add.length);
  row(`  after the ADD returned: pinned map`, after(r.add, (x) => x.mapFromStartMs), r.add.length);
  const trip = r.add.flatMap((x) => (x.mapFromStartMs === undefined || x.localMapFromStartMs === undefined || x.mapLate ? [] : [Math.max(0, x.mapFromStartMs - x.localMapFromStartMs)]));
  row(`  A's pinned map → C's pinned map`, trip, r.add.filter((x) => !x.mapLate).length, 'the trip through etcd alone');
  console.log(`    ADD on A p50 ${f(q(addMs, 0.5))} p99 ${f(q(addMs, 0.99))}; map polled for a guessed address, wrong in ${r.add.filter((x) => x.mapLate).length} (timed from the ADD's return there)${r.addError ? `; FAILED: ${r.addError}` : ''}`);
  console.log(`  (set-up ${(r.setupMs / 1000).toFixed(1)} s; "unseen": not within 3 s (policy) / 5 s (ADD))`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printClusterPropagation(await runClusterPropagationBench(Number(process.argv[2] ?? 100), (process.argv[3] as BenchRoutingMode | undefined) ?? 'tunnel'));
}
