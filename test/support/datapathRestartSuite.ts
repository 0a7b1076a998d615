// An established TCP stream between two pods runs across agent restarts
// (SIGTERM and start, SIGKILL and start) with no drop counted and no burst of
// retransmits: the pinned maps (conntrack included) and programs stay in force
// while the agent is down and are taken over, not rebuilt, when it comes back;
// the routes and addresses a previous start wrote are left as they are (the
// node's and the pods' namespaces see no route, address or neighbour change).
// Policy stays enforced throughout. One suite for every address family
// (family.ts; wrappers test/e2e/datapathRestart*.test.ts): the stream runs on
// the family's last IP version (IPv6 on dual-stack pods, whose IPv4 stream is
// the IPv4 run's), the policy checks on every version.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { importPolicyAndWait } from './datapathNode.js';
import { bpfConntrack, bpfMetrics, dropCounts, tcpCounters } from './datapathObserve.js';
import { type Scene, startScene } from './datapathScene.js';
import { type Family, familyName, type IpFamily, versionsOf } from './family.js';
import { NetnsPool } from './netns.js';
import type { Peer } from './policyTruthTable.js';
import { requireRoot } from './root.js';
import { RtnetlinkWatch } from './rtnetlinkWatch.js';

const NS = 'tdl-r';
const POD_CIDR = '10.255.0.0/24';
const IPERF_PORT = 5201;
/** Paced, so the stream leaves CPU to the restarting agent on a small machine. */
const RATE_BITS = 200_000_000;
const DURATION_S = 18;

const POLICY = `apiVersion: tendril.io/v1
kind: TendrilNetworkPolicy
metadata: {name: receiver, namespace: ${NS}}
spec:
  endpointSelector: {matchLabels: {app: receiver}}
  ingress:
  - fromEndpoints: [{matchLabels: {app: sender}}]
`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function datapathRestartSuite(family: Family, tag: string): void {
  requireRoot('the datapath restart test');
  const versions = versionsOf(family);
  /** The stream's IP version. */
  const streamVersion = versions[versions.length - 1]!;
  const pool = new NetnsPool(tag);
  let scene: Scene | undefined;
  const children: ChildProcess[] = [];
  /** Stopped by the test, or in `after` when it failed first. */
  let watches: RtnetlinkWatch[] = [];
  const peer = (app: string, v: IpFamily = streamVersion): Peer => scene!.peersIn(v).get(`${NS}/${app}`)!;

  before(async () => {
    scene = await startScene(pool, {
      nodeName: `tdl-node-rs-${familyName(family)}`,
      family,
      podCidr: POD_CIDR,
      pods: ['sender', 'receiver', 'intruder'].map((app) => ({ name: app, namespace: NS, labels: { app } })),
      tcpPorts: [80],
      udpPorts: [],
      outside: [],
    });
    await importPolicyAndWait(scene.node, POLICY);
  });

  after(async () => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    for (const w of watches) await w.stop();
    if (scene) await scene.cleanup();
    else await pool.cleanup();
  });

  /** Spawns a process inside a namespace, collecting its output; killed in `after` if still running. */
  function spawnIn(netnsPath: string, argv: string[]): { child: ChildProcess; output: () => string; stdout: () => string; exited: Promise<number | null> } {
    const child = spawn('nsenter', [`--net=${netnsPath}`, '--', ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    let err = '';
    child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (err += c.toString()));
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    return { child, output: () => out + (err ? `\nstderr: ${err}` : ''), stdout: () => out, exited };
  }

  interface IperfResult {
    intervals: Array<{ sum: { bits_per_second: number; retransmits?: number; start: number; end: number } }>;
    end: { sum_sent: { retransmits: number; bytes: number; bits_per_second: number } };
    error?: string;
  }

  /** Whether `tendril bpf ct list` showed the stream's entry after the SIGTERM restart. */
  let streamCtAfterRestart: boolean | undefined;

  /** One denied probe per IP version: intruder -> receiver, counted so the policy drops it adds can be told apart. */
  let deniedProbes = 0;
  async function intruderDenied(): Promise<boolean> {
    let denied = true;
    for (const v of versions) {
      deniedProbes++;
      const r = await peer('intruder', v).prober.probe({ proto: 'tcp', port: 80, dst: peer('receiver', v).address, timeoutMs: 400 });
      denied &&= r.outcome === 'timeout';
    }
    return denied;
  }

  test('an iperf3 stream survives SIGTERM and SIGKILL restarts of the agent with no drop and no retransmit burst', async (t) => {
    const node = scene!.node;
    const [sender, receiver] = [peer('sender'), peer('receiver')];
    for (const v of versions) {
      assert.equal((await peer('sender', v).prober.probe({ proto: 'tcp', port: 80, dst: peer('receiver', v).address, timeoutMs: 2000 })).outcome, 'open', `sender -> receiver is allowed on IPv${v}`);
    }
    assert.ok(await intruderDenied(), 'intruder -> receiver is denied before the restarts');

    const server = spawnIn(scene!.pods.get(`${NS}/receiver`)!.netnsPath, ['iperf3', '-s', '-p', String(IPERF_PORT), '--forceflush']);
    for (let i = 0; !server.output().includes('Server listening'); i++) {
      if (i > 50) throw new Error(`iperf3 server did not start: ${server.output()}`);
      await sleep(100);
    }
    const senderNetns = scene!.pods.get(`${NS}/sender`)!.netnsPath;
    const receiverNetns = scene!.pods.get(`${NS}/receiver`)!.netnsPath;
    const tcpBefore = await tcpCounters(senderNetns);
    const rxBefore = await tcpCounters(receiverNetns);
    const dropsBefore = dropCounts(await bpfMetrics(node));
    deniedProbes = 0;

    // The sender stays on one CPU. A veth hands each segment to the backlog of the CPU that sent it: a sender
    // moved between CPUs while one of them is busy (the agent starting, anything else on the machine) leaves
    // segments queued there while later ones go through the other, and the receiver counts them out of order.
    // That is the kernel's, not the datapath's: measured with no restart at all, only busy loops beside the
    // stream, 1 run in 8 saw it unpinned and none in 6 pinned. Pinned, out of order means a datapath gap.
    const client = spawnIn(scene!.pods.get(`${NS}/sender`)!.netnsPath, ['taskset', '-c', '0', 'iperf3', '-c', receiver.address, '-p', String(IPERF_PORT), '-t', String(DURATION_S), '-b', String(RATE_BITS), '-i', '1', '-J']);
    const downChecks: string[] = [];
    await sleep(2500);
    // What the restarts write into the node's and the pods' namespaces: nothing, since everything is already in force.
    watches = await Promise.all([node.nodePath, senderNetns, receiverNetns].map((p) => RtnetlinkWatch.start(p)));

    // SIGTERM: a clean stop. The pinned programs and maps keep forwarding and enforcing.
    await node.agent.stop();
    await sleep(500);
    if (!(await intruderDenied())) downChecks.push('intruder reached the receiver while the agent was stopped');
    await sleep(500);
    await node.agent.start();
    // Checked in a test of its own (below): the stream's survival does not hang on what the CLI lists.
    const ct = await bpfConntrack(node);
    streamCtAfterRestart = ct.some((r) => r.saddr === sender.address && r.daddr === receiver.address && r.dport === IPERF_PORT && r.proto === 6);
    await sleep(1500);

    // SIGKILL: no chance to clean up anything.
    await node.agent.kill();
    await sleep(500);
    if (!(await intruderDenied())) downChecks.push('intruder reached the receiver while the agent was dead');
    await sleep(500);
    await node.agent.start();
    await sleep(200);
    for (const w of watches) await w.stop();
    const [nodeChanges, senderChanges, receiverChanges] = watches.map((w) => w.changes());

    const code = await client.exited;
    server.child.kill('SIGTERM');
    assert.equal(code, 0, `iperf3 client failed: ${client.output().slice(-2000)}`);
    const result = JSON.parse(client.stdout()) as IperfResult;
    assert.equal(result.error, undefined, result.error);
    assert.deepEqual(downChecks, []);

    const rates = result.intervals.map((i) => i.sum.bits_per_second / 1e6);
    t.diagnostic(`${familyName(family)}, stream on IPv${streamVersion}: iperf3: ${(result.end.sum_sent.bits_per_second / 1e6).toFixed(0)} Mbit/s, ${result.end.sum_sent.retransmits} retransmits, slowest second ${Math.min(...rates).toFixed(0)} Mbit/s`);
    // No stall: every second of the stream carried a good part of the paced rate.
    const slow = result.intervals.filter((i) => i.sum.bits_per_second < RATE_BITS * 0.25).map((i) => `${i.sum.start.toFixed(0)}-${i.sum.end.toFixed(0)} s: ${(i.sum.bits_per_second / 1e6).toFixed(1)} Mbit/s`);
    assert.deepEqual(slow, [], 'intervals below a quarter of the paced rate');
    assert.ok(result.intervals.length >= DURATION_S - 1, `${result.intervals.length} intervals`);
    // No retransmit burst. On a loaded machine a late ACK makes the sender send tail loss probes
    // that the receiver reports as duplicates (D-SACK): such spurious retransmits happen on a plain
    // veth pair too, in bursts when the machine stalls. What a datapath gap would cause is
    // different: a segment lost or reordered leaves a hole the receiver has to queue out of order
    // behind, and a stall long enough ends in a retransmission timeout.
    const tcpAfter = await tcpCounters(senderNetns);
    const rxAfter = await tcpCounters(receiverNetns);
    const retrans = tcpAfter.retransSegs - tcpBefore.retransSegs;
    const spurious = tcpAfter.dsackRecvSegs - tcpBefore.dsackRecvSegs;
    const perSecond = result.intervals.map((i) => i.sum.retransmits ?? 0).join(' ');
    const outOfOrder = rxAfter.ofoQueue - rxBefore.ofoQueue;
    t.diagnostic(`retransmitted segments ${retrans} (reported duplicate: ${spurious}), loss probes ${tcpAfter.lossProbes - tcpBefore.lossProbes}, receiver out-of-order ${outOfOrder}; iperf3 per second: ${perSecond}`);
    // Counted before any assertion: a failure of one then shows both.
    // The datapath counted no drop but the intruder's probes (one SYN each, dropped by policy).
    await sleep(200);
    const dropsAfter = dropCounts(await bpfMetrics(node));
    const delta: Record<string, number> = {};
    for (const k of new Set([...Object.keys(dropsBefore), ...Object.keys(dropsAfter)])) {
      const d = (dropsAfter[k] ?? 0) - (dropsBefore[k] ?? 0);
      if (d !== 0) delta[k] = d;
    }
    const policyDrops = Object.entries(delta).filter(([k]) => k.startsWith('POLICY')).reduce((s, [, v]) => s + v, 0);
    const otherDrops = Object.fromEntries(Object.entries(delta).filter(([k]) => !k.startsWith('POLICY')));
    t.diagnostic(`drops counted during the stream: ${JSON.stringify(delta)}; intruder probes: ${deniedProbes}`);
    assert.deepEqual({ node: nodeChanges, sender: senderChanges, receiver: receiverChanges }, { node: [], sender: [], receiver: [] }, 'the restarts wrote no route or address and flushed no neighbour: everything was already in force');
    assert.equal(tcpAfter.timeouts - tcpBefore.timeouts, 0, 'no retransmission timeout (no stall)');
    assert.equal(outOfOrder + rxAfter.ofoDrop - rxBefore.ofoDrop, 0, `the receiver got every segment in order: nothing lost or reordered (retransmits ${retrans}, ${spurious} reported duplicate; per second ${perSecond})`);
    assert.ok(retrans <= 10 || spurious >= retrans / 2, `a retransmit burst that is not the receiver's duplicates: ${retrans} retransmitted, ${spurious} duplicate`);
    assert.deepEqual(otherDrops, {}, 'no drop of any other reason during the stream');
    assert.equal(policyDrops, deniedProbes, `policy drops during the stream are the intruder's ${deniedProbes} SYNs: ${JSON.stringify(delta)}`);
  });

  test('the stream\'s conntrack entry survived the SIGTERM restart, as `tendril bpf ct list` shows it (tendril_ct6_* on IPv6)', () => {
    assert.notEqual(streamCtAfterRestart, undefined, 'the stream test ran');
    assert.ok(streamCtAfterRestart, 'the stream\'s conntrack entries survived the restart');
  });

  test('after the restarts the policy is still imported and enforced', async () => {
    const node = scene!.node;
    const get = await node.agent.client.getPolicy();
    assert.deepEqual(get.policies.map((p) => p.name), [`TendrilNetworkPolicy/${NS}/receiver`]);
    assert.ok(await intruderDenied(), 'intruder -> receiver still denied');
    for (const v of versions) {
      assert.equal((await peer('sender', v).prober.probe({ proto: 'tcp', port: 80, dst: peer('receiver', v).address, timeoutMs: 2000 })).outcome, 'open', `sender -> receiver still allowed on IPv${v}`);
    }
    const receiverId = scene!.pods.get(`${NS}/receiver`)!.endpoint.id;
    const p = await node.agent.client.getEndpointPolicy(receiverId);
    assert.equal(p.datapathEnforced, true);
    assert.equal(p.enforcement.ingress.enforced, true);
  });
}
