// Time from `tendril policy import` returning to the change being enforced on
// packets. A probe pair (client app=probe-client, server app=probe-server, the
// server in default-deny ingress by a base policy) and a prober in the client's
// namespace that opens a new TCP connection to the server every millisecond,
// each abandoned after 50 ms (a dropped SYN is only retransmitted after 1 s).
// Each import toggles one policy between allowing the probe port and allowing
// another port: "enforced" is the start of the first attempt from which every
// attempt has the new outcome (connects after an allow, times out after the
// removal), minus the moment the CLI process returned; 0 when it was already in
// force before the command returned.
// - one rule: the import holds only the toggled policy (one rule);
// - 1,000 rules over 1,000 endpoints: 1,000 more pods (made through the agent's CNI
//   API, no traffic; 250 identities of 4 pods), and each import holds 1,000 rules
//   (999 that select those pods, each import shifting their ports so every
//   endpoint's map changes, plus the toggled one). Reported beside the packets:
//   the time until every endpoint the import regenerated reports the new revision
//   as realized (its `policyRevision`, polled from GET /endpoint every 25 ms).
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BenchNamespaces, TendrilBenchNode, ingressRuleDoc, startProbe, startTcpServer } from './policyDatapath.js';
import { percentile } from './stats.js';

const TENDRIL = fileURLToPath(new URL('../../bin/tendril', import.meta.url));
const PORT = 8080;
const FLEET_APPS = 250;

interface Attempt {
  startNs: bigint;
  ok: boolean;
}

export interface ToggleSample {
  /** Expected outcome after the import: true = connections pass. */
  allow: boolean;
  /** ms from the CLI returning to the first attempt of the new outcome (0: in force before it returned); undefined: not seen in 5 s. */
  enforcedMs: number | undefined;
  /** ms from the CLI's start to the first attempt of the new outcome (where in the command the change took hold). */
  fromStartMs: number | undefined;
  /** The CLI's own wall time, ms. */
  importMs: number;
  /** ms from the CLI returning until every regenerated endpoint reports the revision (1,000-rule case). */
  realizedMs?: number;
  regenerated: number;
}

export interface PolicyLatencyReport {
  oneRule: ToggleSample[];
  thousandRules: ToggleSample[];
  fleetEndpoints: number;
  fleetAddMs: number;
}

/** The policies of one 1,000-rule import: 999 over the fleet (ports shifted by `variant`), and the probe toggle. */
function fleetDocs(variant: number, allow: boolean): string {
  const docs: string[] = [];
  for (let j = 0; j < 999; j++) {
    docs.push(ingressRuleDoc(`fleet-${j}`, `fleet${j % FLEET_APPS}`, `fleet${(j * 7 + 1) % FLEET_APPS}`, 20000 + ((j + variant * 37) % 5000)));
  }
  docs.push(ingressRuleDoc('probe-toggle', 'probe-server', 'probe-client', allow ? PORT : PORT + 1));
  return docs.join('\n---\n');
}

class ProbeLog {
  readonly attempts: Attempt[] = [];
  add = (startNs: bigint, ok: boolean) => this.attempts.push({ startNs, ok });

  /**
   * The start of the first attempt (started at or after `since`) from which every
   * finished attempt has outcome `ok`, once at least `stable` of them have it;
   * undefined while that is not yet so.
   */
  settled(since: bigint, ok: boolean, finishedBefore: bigint, stable = 30): bigint | undefined {
    const xs = this.attempts.filter((a) => a.startNs >= since && a.startNs < finishedBefore).sort((a, b) => (a.startNs < b.startNs ? -1 : a.startNs > b.startNs ? 1 : 0));
    let from = 0;
    for (let i = 0; i < xs.length; i++) if (xs[i]!.ok !== ok) from = i + 1;
    return xs.length - from >= stable ? xs[from]!.startNs : undefined;
  }
}

/** Runs `tendril policy import <file>`; the hrtime at start and when the process has exited, and its JSON answer. */
async function cliImport(socket: string, file: string): Promise<{ startNs: bigint; returnedNs: bigint; revision: number; regenerated: number[] }> {
  const startNs = process.hrtime.bigint();
  const child = spawn(TENDRIL, ['policy', 'import', file, '--socket', socket, '-o', 'json'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', resolve);
  });
  const returnedNs = process.hrtime.bigint();
  if (code !== 0) throw new Error(`tendril policy import exited ${code}: ${err.slice(-1000)}`);
  const r = JSON.parse(out) as { revision: number; regenerated: number[] };
  return { startNs, returnedNs, revision: r.revision, regenerated: r.regenerated };
}

/** One measured import: CLI, then packets (and, with `fleet`, the realized revision of every regenerated endpoint). */
async function measureToggle(node: TendrilBenchNode, probe: ProbeLog, file: string, allow: boolean, fleet: boolean): Promise<ToggleSample> {
  // The agent done with the previous change (the probe's flow events may keep it a little busy).
  await node.waitIdle(0.15, 5000);
  const r = await cliImport(node.socket, file);
  let realizedMs: number | undefined;
  const realized = fleet
    ? node.waitRealized(r.revision, new Set(r.regenerated), 60_000, 25).then(() => {
        realizedMs = Number(process.hrtime.bigint() - r.returnedNs) / 1e6;
      })
    : Promise.resolve();
  let enforcedNs: bigint | undefined;
  const deadline = r.returnedNs + 5_000_000_000n;
  for (;;) {
    const now = process.hrtime.bigint();
    // Only attempts old enough to have an outcome (a failure reports after its 50 ms timeout).
    enforcedNs = probe.settled(r.startNs, allow, now - 70_000_000n);
    if (enforcedNs !== undefined || now > deadline) break;
    await new Promise((res) => setTimeout(res, 20));
  }
  await realized;
  const enforcedMs = enforcedNs === undefined ? undefined : Math.max(0, Number(enforcedNs - r.returnedNs) / 1e6);
  const fromStartMs = enforcedNs === undefined ? undefined : Number(enforcedNs - r.startNs) / 1e6;
  return { allow, enforcedMs, fromStartMs, importMs: Number(r.returnedNs - r.startNs) / 1e6, ...(realizedMs !== undefined ? { realizedMs } : {}), regenerated: r.regenerated.length };
}

export async function runPolicyLatencyBench(toggles = 10, fleetToggles = 6, fleetSize = 1000): Promise<PolicyLatencyReport> {
  const tag = `tdlpl${process.pid % 10000}`;
  const namespaces = new BenchNamespaces();
  const scratch = await mkdtemp(join(tmpdir(), 'tdl-bench-plat-'));
  let node: TendrilBenchNode | undefined;
  let server: { stop: () => void } | undefined;
  let prober: { stop: () => Promise<void> } | undefined;
  try {
    const [nodeNs, clientNs, serverNs] = [`${tag}n`, `${tag}c`, `${tag}s`];
    await namespaces.add(nodeNs, clientNs, serverNs);
    node = await TendrilBenchNode.start(nodeNs, join(scratch, 'state'), '10.250.0.0/21');
    await node.addPod('probe-client', clientNs, 'app=probe-client');
    const probeServer = await node.addPod('probe-server', serverNs, 'app=probe-server');
    server = await startTcpServer(serverNs, probeServer.ip, PORT);
    // The server in default-deny ingress: a base policy that allows only a peer that does not exist.
    await node.waitRealized(await node.importPolicies([ingressRuleDoc('probe-base', 'probe-server', 'nobody', PORT)]), new Set([probeServer.endpointId]));

    const probe = new ProbeLog();
    prober = startProbe(clientNs, probeServer.ip, PORT, probe.add);
    const oneRule: ToggleSample[] = [];
    for (let i = 0; i < toggles; i++) {
      const allow = i % 2 === 0;
      const file = join(scratch, `toggle-${i}.json`);
      await writeFile(file, ingressRuleDoc('probe-toggle', 'probe-server', 'probe-client', allow ? PORT : PORT + 1));
      oneRule.push(await measureToggle(node, probe, file, allow, false));
    }

    // 1,000 endpoints through the agent's CNI API, 16 ADDs in flight (the prober paused meanwhile).
    await prober.stop();
    const fleetNs = Array.from({ length: fleetSize }, (_, i) => `${tag}f${i}`);
    const t0 = performance.now();
    await namespaces.addBare(fleetNs);
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < fleetSize) {
          const i = next++;
          await node!.addPod(`fleet-${i}`, fleetNs[i]!, `app=fleet${i % FLEET_APPS}`);
        }
      }),
    );
    const fleetAddMs = performance.now() - t0;
    await node.waitIdle();
    prober = startProbe(clientNs, probeServer.ip, PORT, probe.add);
    // The first 1,000-rule import creates the policies (not measured: it adds, the measured ones replace).
    const first = join(scratch, 'fleet-init.json');
    await writeFile(first, fleetDocs(0, false));
    await measureToggle(node, probe, first, false, true);
    const thousandRules: ToggleSample[] = [];
    for (let i = 1; i <= fleetToggles; i++) {
      const allow = i % 2 === 1;
      const file = join(scratch, `fleet-${i}.json`);
      await writeFile(file, fleetDocs(i, allow));
      thousandRules.push(await measureToggle(node, probe, file, allow, true));
    }
    return { oneRule, thousandRules, fleetEndpoints: fleetSize, fleetAddMs };
  } finally {
    if (prober) await prober.stop();
    server?.stop();
    if (node) await node.stop();
    await namespaces.cleanup();
    await rm(scratch, { recursive: true, force: true });
  }
}

export function printPolicyLatency(r: PolicyLatencyReport): void {
  const f = (x: number | undefined) => (x === undefined ? '   n/a' : x.toFixed(1).padStart(7));
  const row = (name: string, xs: ToggleSample[]) => {
    const seen = xs.flatMap((x) => (x.enforcedMs === undefined ? [] : [x.enforcedMs]));
    const q = (v: number[], p: number) => (v.length ? percentile(v, p) : undefined);
    const realized = xs.flatMap((x) => (x.realizedMs === undefined ? [] : [x.realizedMs]));
    const imp = xs.map((x) => x.importMs);
    console.log(
      `  ${name.padEnd(34)} ${f(q(seen, 0.5))} ${f(q(seen, 0.99))}   ${String(xs.length - seen.length).padStart(5)}   ${f(q(imp, 0.5))}   ${realized.length ? `${f(q(realized, 0.5))} ${f(q(realized, 0.99))} (${xs[0]!.regenerated} endpoints)` : ''}`,
    );
    const allowSeen = xs.filter((x) => x.allow && x.enforcedMs !== undefined).map((x) => x.enforcedMs!);
    const denySeen = xs.filter((x) => !x.allow && x.enforcedMs !== undefined).map((x) => x.enforcedMs!);
    const fromStart = xs.flatMap((x) => (x.fromStartMs === undefined ? [] : [x.fromStartMs]));
    console.log(
      `    allow→ p50 ${f(q(allowSeen, 0.5))}, removal→ p50 ${f(q(denySeen, 0.5))}; in force before the CLI returned: ${xs.filter((x) => x.enforcedMs === 0).length}/${xs.length}; CLI start→enforced p50 ${f(q(fromStart, 0.5))} p99 ${f(q(fromStart, 0.99))}`,
    );
  };
  console.log('\nPolicy change → enforced on packets (ms after `tendril policy import` returned; a new TCP connection per ms probes it)');
  console.log(`  ${''.padEnd(34)} ${'p50'.padStart(7)} ${'p99'.padStart(7)}   unseen   CLI p50   realized p50/p99 (every regenerated endpoint)`);
  row(`one rule (${r.oneRule.length} imports)`, r.oneRule);
  row(`1,000 rules, ${r.fleetEndpoints} endpoints (${r.thousandRules.length})`, r.thousandRules);
  console.log(`  (${r.fleetEndpoints} endpoints added through the agent's CNI API in ${(r.fleetAddMs / 1000).toFixed(1)} s; "unseen": not enforced within 5 s)`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printPolicyLatency(await runPolicyLatencyBench(Number(process.argv[2] ?? 10), Number(process.argv[3] ?? 6), Number(process.argv[4] ?? 1000)));
}
