// Flows over time on the eBPF datapath: conntrack lets replies of a one-way
// allow back but no new connection the other way; deleting a policy restores
// traffic; a label patch moves enforcement with it; a pod's first packet after
// ADD is already enforced; drops show in `tendril monitor -o json` and, after
// the fact, in `tendril observe` naming the
// rule that decided, and are counted in the flow metrics.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { deletePolicyAndWait, importPolicyAndWait, podRuntimeConf } from '../support/datapathNode.js';
import { bpfConntrack, bpfMetrics, dropCounts, eventually, MonitorStream } from '../support/datapathObserve.js';
import { type Scene, startScene } from '../support/datapathScene.js';
import { NetnsPool } from '../support/netns.js';
import type { Peer } from '../support/policyTruthTable.js';
import { type Probe, type ProbeOutcome, reachable } from '../support/reachability.js';
import { requireRoot } from '../support/root.js';
import { tendrilPolicy } from '../support/policyDocuments.js';
import type { MonitorEvent } from '../../src/monitor/types.js';
import type { Flow } from '../../src/flow/types.js';
import { TENDRIL_BIN } from '../support/tendrilBin.js';
import { AgentClient } from '../../src/client/agentClient.js';
import { sampleValue } from '../../src/metrics/testing/exposition.js';

requireRoot('the datapath flow tests');

const NS = 'tdl-f';
const POD_CIDR = '10.254.0.0/24';

const TNP = (name: string, spec: string): string => tendrilPolicy(NS, name, spec);

const pool = new NetnsPool('dpf');
let scene: Scene | undefined;
const peer = (app: string): Peer => {
  const p = scene!.peers.get(`${NS}/${app}`);
  if (!p) throw new Error(`no pod ${app}`);
  return p;
};

/** One probe from `src` to `dst`'s address (an expected drop costs the default 400 ms). */
async function probe(src: Peer, dst: Peer, p: Omit<Probe, 'dst'>): Promise<ProbeOutcome> {
  return (await src.prober.probe({ ...p, dst: dst.address, ...(src.bindSource ? { src: src.address } : {}) })).outcome;
}

/** A probe expected to get through: a long timeout, since an answer comes in milliseconds unless the machine stalls. */
const probeOpen = (src: Peer, dst: Peer, p: Omit<Probe, 'dst'>) => probe(src, dst, { timeoutMs: 2000, ...p });

const TCP80 = { proto: 'tcp' as const, port: 80 };
const UDP53 = { proto: 'udp' as const, port: 53 };
const ICMP = { proto: 'icmp' as const };

before(async () => {
  scene = await startScene(pool, {
    nodeName: 'tdl-node-fl',
    podCidr: POD_CIDR,
    pods: ['client', 'server', 'other', 'db', 'watched'].map((app) => ({ name: app, namespace: NS, labels: { app } })),
    tcpPorts: [80],
    udpPorts: [53],
    outside: [],
  });
  const ns = await pool.add('locked');
  lockedNetns = ns.name;
  lockedPath = ns.path;
});

// A pod added in the middle of a test: ADD and DEL by hand, to probe the instant ADD answers.
let lockedNetns = '';
let lockedPath = '';
const lockedConf = () => podRuntimeConf({ name: 'locked', namespace: NS, labels: { app: 'locked' } }, `tdl-${pool.prefix}-locked`, lockedPath);

after(async () => {
  if (scene) await scene.cleanup();
  else await pool.cleanup();
});

describe('conntrack: a one-way allow', () => {
  const ONE_WAY =
    TNP('server', 'endpointSelector: {matchLabels: {app: server}}\ningress:\n- fromEndpoints: [{matchLabels: {app: client}}]\negress:\n- {}') +
    TNP('client', 'endpointSelector: {matchLabels: {app: client}}\ningress:\n- {}');

  test('replies come back; nothing new goes the other way', async () => {
    await importPolicyAndWait(scene!.node, ONE_WAY);
    const [client, server] = [peer('client'), peer('server')];
    // server's egress and client's ingress deny everything: only conntrack lets the answers through.
    for (const p of [TCP80, UDP53, ICMP]) {
      assert.equal(await probeOpen(client, server, p), 'open', `client -> server ${p.proto}: the reply rides conntrack`);
      assert.equal(await probe(server, client, p), 'timeout', `server -> client ${p.proto}: no new flow the other way`);
    }
    const ct = await bpfConntrack(scene!.node);
    const flow = ct.find((r) => r.saddr === client.address && r.daddr === server.address && r.proto === 6 && r.dport === 80);
    assert.ok(flow, `a TCP conntrack entry client -> server:80 (${ct.length} entries)`);
    assert.equal(flow.replySeen, true, 'the entry saw the reply');
    assert.ok(!ct.some((r) => r.saddr === server.address && r.daddr === client.address && r.dport === 80), 'no entry for the denied direction');
  });

  test('policy deleted → traffic restored in both directions', async () => {
    const [client, server] = [peer('client'), peer('server')];
    assert.equal(await probe(server, client, TCP80), 'timeout', 'still denied before the delete');
    const deleted = await deletePolicyAndWait(scene!.node, ['--namespace', NS, '--name', 'server']);
    assert.deepEqual(deleted, [`TendrilNetworkPolicy/${NS}/server`]);
    // client's ingress still default-deny: server -> client stays shut until that one goes too.
    assert.equal(await probe(server, client, TCP80), 'timeout');
    await deletePolicyAndWait(scene!.node, ['--namespace', NS, '--name', 'client']);
    for (const p of [TCP80, UDP53, ICMP]) {
      assert.equal(await probeOpen(server, client, p), 'open', `server -> client ${p.proto} after the delete`);
      assert.equal(await probeOpen(client, server, p), 'open', `client -> server ${p.proto} after the delete`);
    }
  });
});

describe('labels', () => {
  const DB = TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{matchLabels: {app: web}}]');
  const patch = (app: string, add: string, del: string) => scene!.node.agent.client.patchEndpointLabels(scene!.pods.get(`${NS}/${app}`)!.endpoint.id, { add: [`k8s:app=${add}`], delete: [`k8s:app=${del}`] });

  test('a peer\'s label patched → it is allowed; patched back → denied again', async () => {
    await importPolicyAndWait(scene!.node, DB);
    const [other, db] = [peer('other'), peer('db')];
    assert.equal(await probe(other, db, TCP80), 'timeout', 'app=other is not allowed');
    const patched = await patch('other', 'web', 'other');
    assert.ok(patched.labels.includes('k8s:app=web'), JSON.stringify(patched.labels));
    await eventually(async () => reachable(await probe(other, db, TCP80)), 5000, 'other (now app=web) reaches db');
    assert.equal(await probeOpen(other, db, UDP53), 'open');
    await patch('other', 'other', 'web');
    await eventually(async () => (await probe(other, db, TCP80)) === 'timeout', 5000, 'other (app=other again) is denied');
    assert.equal(await probe(other, db, ICMP), 'timeout');
  });

  test('the subject\'s label patched → its policy no longer selects it; patched back → enforced again', async () => {
    const [client, db] = [peer('client'), peer('db')];
    assert.equal(await probe(client, db, TCP80), 'timeout');
    await patch('db', 'db2', 'db');
    await eventually(async () => reachable(await probe(client, db, TCP80)), 5000, 'db (now app=db2) is open');
    await patch('db', 'db', 'db2');
    await eventually(async () => (await probe(client, db, TCP80)) === 'timeout', 5000, 'db (app=db again) is enforced');
    await deletePolicyAndWait(scene!.node, ['--namespace', NS, '--name', 'db']);
  });
});

describe('a new pod', () => {
  test('its first packet after ADD is already enforced, both ways', async () => {
    await importPolicyAndWait(scene!.node, TNP('fresh', 'endpointSelector: {matchLabels: {app: locked}}\ningress:\n- {}\negress:\n- {}'));
    const server = peer('server');
    const client = peer('client');
    const before = dropCounts(await bpfMetrics(scene!.node));
    // Straight after ADD answers: one echo request out of the pod, one UDP datagram and one echo request into it.
    const locked = await scene!.node.runtime.addNetworkList(scene!.node.conflist, lockedConf());
    const lockedIp = (locked as { ips: Array<{ address: string }> }).ips[0]!.address.split('/')[0]!;
    const [out, inUdp, inIcmp] = await Promise.all([
      pool.exec(lockedNetns, ['ping', '-n', '-c', '1', '-W', '0.5', server.address]),
      client.prober.probe({ proto: 'udp', port: 53, dst: lockedIp, timeoutMs: 500 }),
      client.prober.probe({ proto: 'icmp', dst: lockedIp, timeoutMs: 500 }),
    ]);
    assert.equal(out.code, 1, `the locked pod's first echo request is dropped: ${out.stdout}${out.stderr}`);
    assert.equal(inUdp.outcome, 'timeout', 'the first datagram into the locked pod is dropped (an open port-less pod would answer "refused")');
    assert.equal(inIcmp.outcome, 'timeout', 'the first echo request into the locked pod is dropped');
    const after = dropCounts(await bpfMetrics(scene!.node));
    const policyDrops = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('POLICY')).reduce((s, [, v]) => s + v, 0);
    assert.ok(policyDrops(after) - policyDrops(before) >= 3, `three policy drops counted: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);

    // The control: a pod no policy selects talks from its first packet on.
    const open = await scene!.addPod({ name: 'fresh', namespace: NS, labels: { app: 'fresh' } });
    const [openOut, openIn] = await Promise.all([
      pool.exec(open.netns, ['ping', '-n', '-c', '1', '-W', '2', server.address]),
      client.prober.probe({ proto: 'icmp', dst: open.ip, timeoutMs: 2000 }),
    ]);
    assert.equal(openOut.code, 0, `an unselected pod's first echo request gets its reply: ${openOut.stderr}`);
    assert.equal(openIn.outcome, 'open');
    await scene!.node.runtime.delNetworkList(scene!.node.conflist, lockedConf());
    await deletePolicyAndWait(scene!.node, ['--namespace', NS, '--name', 'fresh']);
  });
});

describe('tendril monitor', () => {
  const WATCH = TNP(
    'watch',
    'endpointSelector: {matchLabels: {app: watched}}\ningress:\n- fromEndpoints: [{matchLabels: {app: client}}]\ningressDeny:\n- fromEndpoints: [{matchLabels: {app: other}}]\n  toPorts: [{ports: [{port: "80", protocol: TCP}]}]',
  );
  let monitor: MonitorStream | undefined;
  after(async () => monitor?.stop());

  test('drops and verdicts in `tendril monitor -o json` name the rule that decided', async () => {
    await importPolicyAndWait(scene!.node, WATCH);
    const [client, other, server, watched] = [peer('client'), peer('other'), peer('server'), peer('watched')];
    const watchedId = scene!.pods.get(`${NS}/watched`)!.endpoint.id;
    monitor = MonitorStream.start(scene!.node);
    // The monitor subscribes asynchronously: repeat a denied probe until its drop shows up.
    const policy = `TendrilNetworkPolicy/${NS}/watch`;
    const isDenyDrop = (e: MonitorEvent) =>
      e.type === 'drop' && e.source.ip === other.address && e.destination.ip === watched.address && e.destination.port === 80 && e.protocol === 'tcp';
    await eventually(
      async () => {
        await probe(other, watched, { ...TCP80, timeoutMs: 300 });
        return monitor!.events.some(isDenyDrop);
      },
      10_000,
      `a drop event for other -> watched:80 (monitor stderr: ${monitor.errors})`,
    );
    const denyDrop = monitor.events.find(isDenyDrop)!;
    assert.equal(denyDrop.drop?.reason, 'POLICY_DENY', JSON.stringify(denyDrop));
    assert.equal(denyDrop.direction, 'ingress');
    assert.equal(denyDrop.destination.endpoint, watchedId);
    assert.equal(denyDrop.rule?.text, `${policy} spec.ingressDeny[0]`, JSON.stringify(denyDrop.rule));
    assert.ok(denyDrop.source.labels.includes('k8s:app=other'), JSON.stringify(denyDrop.source));

    const verdict = await monitor.waitFor((e) => e.type === 'policy-verdict' && e.source.ip === other.address && e.destination.ip === watched.address, 3000, 'a DENIED verdict');
    assert.equal(verdict.verdict, 'denied');
    assert.equal(verdict.rule?.text, `${policy} spec.ingressDeny[0]`);

    // Default deny: a drop with no deciding rule, said as such.
    await probe(server, watched, TCP80);
    const noMatch = await monitor.waitFor((e) => e.type === 'drop' && e.source.ip === server.address && e.destination.ip === watched.address, 3000, 'a default-deny drop');
    assert.equal(noMatch.drop?.reason, 'POLICY');
    assert.match(noMatch.rule?.text ?? '', /default deny/);

    // An allowed new flow: an ALLOWED verdict naming the allow rule.
    assert.equal(await probeOpen(client, watched, TCP80), 'open');
    const allowed = await monitor.waitFor(
      (e) => e.type === 'policy-verdict' && e.verdict === 'allowed' && e.source.ip === client.address && e.destination.ip === watched.address && e.direction === 'ingress',
      3000,
      'an ALLOWED verdict',
    );
    assert.equal(allowed.rule?.text, `${policy} spec.ingress[0]`);
    await deletePolicyAndWait(scene!.node, ['--namespace', NS, '--name', 'watch']);
  });
});

describe('tendril observe', () => {
  const GUARD = TNP(
    'guard',
    'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{matchLabels: {app: client}}]\ningressDeny:\n- fromEndpoints: [{matchLabels: {app: other}}]\n  toPorts: [{ports: [{port: "80", protocol: TCP}]}]',
  );

  test('a policy drop is in the history after the fact, with its pods and its rule, though nobody listened, and in the flow metrics', async () => {
    // Earlier tests of this file left their own drops towards db in the history: only this test's count.
    const start = new Date(Date.now() - 1000).toISOString();
    await importPolicyAndWait(scene!.node, GUARD);
    const [client, other, db] = [peer('client'), peer('other'), peer('db')];
    // Refused three times from three source ports: one flow in the history, counted three times.
    for (let i = 0; i < 3; i++) assert.equal(await probe(other, db, { ...TCP80, timeoutMs: 300 }), 'timeout');
    assert.equal(await probeOpen(client, db, TCP80), 'open');
    const observe = async (args: string[]): Promise<Flow[]> => {
      const r = await scene!.node.cli(['observe', ...args, '-o', 'json']);
      assert.equal(r.code, 0, r.stderr);
      return r.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Flow);
    };
    let drops: Flow[] = [];
    await eventually(
      async () => {
        drops = await observe(['--since', start, '--to-pod', `${NS}/db`, '--verdict', 'dropped', '--type', 'drop']);
        return drops.some((f) => f.count >= 3);
      },
      5000,
      'the refused flow, three times',
    );
    const drop = drops.find((f) => f.count >= 3)!;
    assert.equal(drops.length, 1, JSON.stringify(drops));
    assert.equal(drop.event.source.ip, other.address);
    assert.deepEqual(drop.event.source.pod, { namespace: NS, name: 'other' });
    assert.deepEqual(drop.event.destination.pod, { namespace: NS, name: 'db' });
    assert.equal(drop.event.drop?.reason, 'POLICY_DENY');
    assert.equal(drop.event.rule?.text, `TendrilNetworkPolicy/${NS}/guard spec.ingressDeny[0]`);
    assert.equal(drop.node, 'tdl-node-fl');

    const allowed = await observe(['--since', start, '--from-pod', `${NS}/client`, '--to-label', 'app=db', '--verdict', 'forwarded', '--type', 'policy-verdict']);
    assert.ok(allowed.length >= 1, 'the allowed connection');
    assert.ok(allowed.every((f) => f.event.source.ip === client.address && f.event.rule?.text === `TendrilNetworkPolicy/${NS}/guard spec.ingress[0]`), JSON.stringify(allowed));

    // The compact line says the same for people.
    const compact = await scene!.node.cli(['observe', '--from-pod', `${NS}/other`, '--to-pod', `${NS}/db`, '--verdict', 'dropped', '--type', 'drop', '--last', '1']);
    assert.equal(compact.code, 0, compact.stderr);
    assert.match(compact.stdout, new RegExp(`${NS}/other:\\d+ \\(ID:\\d+\\) -> ${NS}/db:80 \\(ID:\\d+\\) drop \\(POLICY_DENY\\) ingress DROPPED tcp SYN.*rule: TendrilNetworkPolicy/${NS}/guard spec\\.ingressDeny\\[0\\] ×[3-9]`));

    // A filter the agent cannot take is refused with its reason, before anything is sent.
    const bad = await scene!.node.cli(['observe', '--verdict', 'maybe']);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /--verdict must be one of forwarded, dropped/);

    // The flow metrics counted the same events: the drops by reason, the verdicts by the rule that decided.
    const metrics = await new AgentClient({ socketPath: scene!.node.agent.socket }).metrics();
    const guard = `TendrilNetworkPolicy/${NS}/guard`;
    assert.ok((sampleValue(metrics, 'tendril_flow_drops_total', { reason: 'POLICY_DENY', direction: 'ingress' }) ?? 0) >= 3, metrics);
    assert.ok((sampleValue(metrics, 'tendril_policy_verdicts_total', { direction: 'ingress', verdict: 'dropped', rule: `${guard} spec.ingressDeny[0]` }) ?? 0) >= 3, metrics);
    assert.ok((sampleValue(metrics, 'tendril_policy_verdicts_total', { direction: 'ingress', verdict: 'forwarded', rule: `${guard} spec.ingress[0]` }) ?? 0) >= 1, metrics);
    assert.ok((sampleValue(metrics, 'tendril_flows_processed_total', { type: 'drop', verdict: 'dropped' }) ?? 0) >= 3, metrics);
    await deletePolicyAndWait(scene!.node, ['--namespace', NS, '--name', 'guard']);
  });

  test('--follow streams new flows as they happen', async () => {
    const [client, server] = [peer('client'), peer('server')];
    const { spawn } = await import('node:child_process');
    const child = spawn(TENDRIL_BIN, ['observe', '--follow', '--last', '0', '--from-pod', `${NS}/client`, '--to-pod', `${NS}/server`, '-o', 'json', '--socket', scene!.node.agent.socket]);
    const lines: Flow[] = [];
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    let buf = '';
    child.stdout.on('data', (c: Buffer) => {
      buf += c.toString('utf8');
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        lines.push(JSON.parse(buf.slice(0, nl)) as Flow);
        buf = buf.slice(nl + 1);
      }
    });
    try {
      await eventually(
        async () => {
          assert.equal(await probeOpen(client, server, TCP80), 'open');
          return lines.some((f) => f.event.destination.port === 80);
        },
        10_000,
        'a followed flow',
      ).catch(async (err: unknown) => {
        const all = await scene!.node.cli(['observe', '--last', '10', '--to-pod', `${NS}/server`, '-o', 'json']);
        throw new Error(`${(err as Error).message}; followed: ${JSON.stringify(lines)} (stderr ${stderr}); history: ${all.stdout.slice(0, 600)}`);
      });
      assert.ok(lines.every((f) => f.event.source.ip === client.address && f.event.destination.ip === server.address), JSON.stringify(lines));
    } finally {
      child.kill('SIGINT');
    }
  });
});
