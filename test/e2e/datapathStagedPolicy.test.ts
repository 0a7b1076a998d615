// Staged policies on real traffic: a staged policy changes nothing that
// passes, and `tendril monitor -o json` reports exactly the new flows its
// view would decide otherwise (would-drop) with the rule that would decide;
// `tendril policy promote` then enforces it, and the real drop names the
// same rule. Then audit mode: an agent started with --policy-audit-mode
// lets a flow its policy refuses pass, and reports the verdict `audit`.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { cliJson, deletePolicyAndWait, importPolicyAndWait, waitRealized } from '../support/datapathNode.js';
import { eventually, MonitorStream } from '../support/datapathObserve.js';
import { type Scene, startScene } from '../support/datapathScene.js';
import { NetnsPool } from '../support/netns.js';
import type { Peer } from '../support/policyTruthTable.js';
import { type Probe, type ProbeOutcome } from '../support/reachability.js';
import { requireRoot } from '../support/root.js';
import { tendrilPolicy } from '../support/policyDocuments.js';
import type { MonitorEvent } from '../../src/monitor/types.js';

requireRoot('the staged policy and audit mode e2e tests');

const NS = 'tdl-stg';
const PORT_A = 80;
const PORT_B = 8080;

async function probe(src: Peer, dst: Peer, p: Omit<Probe, 'dst'>): Promise<ProbeOutcome> {
  return (await src.prober.probe({ ...p, dst: dst.address, ...(src.bindSource ? { src: src.address } : {}) })).outcome;
}
const tcp = (port: number, timeoutMs = 2000) => ({ proto: 'tcp' as const, port, timeoutMs });

function peerOf(scene: Scene, app: string): Peer {
  const p = scene.peers.get(`${NS}/${app}`);
  if (!p) throw new Error(`no pod ${app}`);
  return p;
}

const flowTo = (src: Peer, dst: Peer, port: number) => (e: MonitorEvent) =>
  e.source.ip === src.address && e.destination.ip === dst.address && e.destination.port === port && e.protocol === 'tcp';

/** One node with two pods, client and server, the server listening on `ports`. */
function clientServerScene(pool: NetnsPool, nodeName: string, podCidr: string, ports: number[], extraAgentArgs: string[] = []): Promise<Scene> {
  const pods = ['client', 'server'].map((app) => ({ name: app, namespace: NS, labels: { app } }));
  return startScene(pool, { nodeName, podCidr, pods, tcpPorts: ports, udpPorts: [], outside: [], extraAgentArgs });
}

async function stop(pool: NetnsPool, scene: Scene | undefined, monitor: MonitorStream | undefined): Promise<void> {
  await monitor?.stop();
  if (scene) await scene.cleanup();
  else await pool.cleanup();
}

describe('staged policies', () => {
  const pool = new NetnsPool('stg');
  let scene: Scene | undefined;
  let monitor: MonitorStream | undefined;
  // Only client → server on port A: staged, so nothing changes until it is promoted.
  const STAGED = tendrilPolicy(NS, 'server-a-only', `endpointSelector: {matchLabels: {app: server}}\ningress:\n- fromEndpoints: [{matchLabels: {app: client}}]\n  toPorts: [{ports: [{port: "${PORT_A}", protocol: TCP}]}]`);
  const POLICY = `TendrilNetworkPolicy/${NS}/server-a-only`;

  before(async () => (scene = await clientServerScene(pool, 'tdl-node-stg', '10.218.0.0/24', [PORT_A, PORT_B])));
  after(async () => stop(pool, scene, monitor));

  test('a staged policy passes both ports and reports exactly the flow it would drop; promoted, it drops that flow with the same rule', async () => {
    const node = scene!.node;
    const [client, server] = [peerOf(scene!, 'client'), peerOf(scene!, 'server')];
    const serverId = scene!.pods.get(`${NS}/server`)!.endpoint.id;

    const imported = await node.cli(['policy', 'import', '-', '--staged', '-o', 'json'], STAGED);
    assert.equal(imported.code, 0, imported.stderr);
    const r = JSON.parse(imported.stdout) as { revision: number; regenerated: number[] };
    assert.ok(r.regenerated.includes(serverId), 'the server\'s staged view was written');
    await waitRealized(node, r.regenerated, r.revision);
    const listed = await cliJson<{ policies: Array<{ name: string; staged?: boolean }> }>(node, ['policy', 'get']);
    assert.deepEqual(listed.policies.map((p) => [p.name, p.staged]), [[POLICY, true]]);

    monitor = MonitorStream.start(node, ['--type', 'policy-verdict', '--type', 'drop']);
    // The monitor subscribes asynchronously: new connections on port B until its report shows up.
    const isWouldDrop = (e: MonitorEvent) => e.type === 'policy-verdict' && e.verdict === 'would-drop';
    await eventually(
      async () => {
        assert.equal(await probe(client, server, tcp(PORT_B)), 'open', 'port B passes while the policy is staged');
        return monitor!.events.some((e) => isWouldDrop(e) && flowTo(client, server, PORT_B)(e));
      },
      10_000,
      `a would-drop event for client -> server:${PORT_B} (monitor stderr: ${monitor.errors})`,
    );
    assert.equal(await probe(client, server, tcp(PORT_A)), 'open', 'port A passes');
    // Let the last events arrive, then: every would-drop is port B's, none port A's.
    await new Promise((res) => setTimeout(res, 500));
    const wouldDrops = monitor.events.filter(isWouldDrop);
    assert.ok(wouldDrops.length > 0);
    for (const e of wouldDrops) assert.ok(flowTo(client, server, PORT_B)(e), `only port B is reported: ${JSON.stringify(e)}`);
    const report = wouldDrops[0]!;
    assert.equal(report.direction, 'ingress');
    assert.equal(report.destination.endpoint, serverId);
    assert.equal(report.rule?.text, `no rule allows (default deny set by ${POLICY} ingress)`, JSON.stringify(report.rule));
    assert.equal(monitor.events.filter((e) => e.type === 'drop').length, 0, 'nothing was dropped');

    // Promote: one revision, the policy enforced.
    const promoted = await cliJson<{ revision: number; promoted: string[]; regenerated: number[] }>(node, ['policy', 'promote', 'server-a-only', '--namespace', NS]);
    assert.deepEqual(promoted.promoted, [POLICY]);
    assert.equal(promoted.revision, r.revision + 1);
    await waitRealized(node, promoted.regenerated, promoted.revision);
    assert.equal((await cliJson<{ policies: Array<{ staged?: boolean }> }>(node, ['policy', 'get'])).policies[0]!.staged, undefined);

    const seen = monitor.events.length;
    assert.equal(await probe(client, server, tcp(PORT_B, 400)), 'timeout', 'port B is dropped once promoted');
    assert.equal(await probe(client, server, tcp(PORT_A)), 'open', 'port A still passes');
    const drop = await monitor.waitFor((e) => e.type === 'drop' && flowTo(client, server, PORT_B)(e), 3000, 'the drop of port B');
    assert.equal(drop.drop?.reason, 'POLICY');
    assert.equal(drop.rule?.text, report.rule?.text, 'the enforced drop names the rule the staged report named');
    assert.equal(monitor.events.slice(seen).filter(isWouldDrop).length, 0, 'nothing is staged any more');

    await deletePolicyAndWait(node, ['--namespace', NS, '--name', 'server-a-only']);
  });
});

describe('policy audit mode', () => {
  const pool = new NetnsPool('aud');
  let scene: Scene | undefined;
  let monitor: MonitorStream | undefined;
  const DENY = tendrilPolicy(NS, 'deny-client', 'endpointSelector: {matchLabels: {app: server}}\ningressDeny:\n- fromEndpoints: [{matchLabels: {app: client}}]');

  before(async () => (scene = await clientServerScene(pool, 'tdl-node-aud', '10.219.0.0/24', [PORT_A], ['--policy-audit-mode'])));
  after(async () => stop(pool, scene, monitor));

  test('a flow a deny rule refuses passes and is reported as audit with the rule; status and config say audit mode is on', async () => {
    const node = scene!.node;
    const [client, server] = [peerOf(scene!, 'client'), peerOf(scene!, 'server')];
    await importPolicyAndWait(node, DENY);
    monitor = MonitorStream.start(node, ['--type', 'policy-verdict', '--type', 'drop']);
    const isAudit = (e: MonitorEvent) => e.type === 'policy-verdict' && e.verdict === 'audit' && flowTo(client, server, PORT_A)(e);
    await eventually(
      async () => {
        assert.equal(await probe(client, server, tcp(PORT_A)), 'open', 'audit mode lets the refused flow pass');
        return monitor!.events.some(isAudit);
      },
      10_000,
      `an audit verdict for client -> server:${PORT_A} (monitor stderr: ${monitor.errors})`,
    );
    const audit = monitor.events.find(isAudit)!;
    assert.equal(audit.direction, 'ingress');
    assert.equal(audit.rule?.text, `TendrilNetworkPolicy/${NS}/deny-client spec.ingressDeny[0]`);
    assert.equal(monitor.events.filter((e) => e.type === 'drop').length, 0, 'no policy drop');

    const config = await cliJson<Record<string, unknown>>(node, ['config']);
    assert.equal(config.policyAuditMode, true);
    const status = await node.cli(['status']);
    assert.match(status.stdout, /AUDIT MODE/);
    await deletePolicyAndWait(node, ['--namespace', NS, '--name', 'deny-client']);
  });
});
