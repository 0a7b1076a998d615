// Upgrades and downgrades between builds whose conntrack and service layouts
// differ (build/bpf-variant: a field added to ct_entry, lb4_service and
// lb4_backend), under traffic: long-lived TCP connections (pod to pod, and
// from an outside host to a NodePort), new connections every few ms from the
// outside host to a NodePort (the native crr client), and a policy that
// denies one pod. No connection breaks, no denied connection passes, and the
// conntrack entries of the held connections are the ones from before (their
// packet counts carried over), not new ones made by the new programs. A
// connection opened in the milliseconds of a swap may wait for a
// retransmit (its segments the new programs do not know yet are held back
// until the last pass carries its entry over), but none fails.
//
// The swaps: the node starts on the variant build's objects (converted from
// the agent's first run); the agent of this build then starts on them and
// adopts them (its own start converts the maps and swaps the programs);
// then the variant build's loader takes the node back (downgrade); then the
// agent starts once more (upgrade again).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { DEFAULT_OBJECT_DIR } from '../../src/datapath/bpf/objects.js';
import { CrrServer, crrErrors, runCrrClient } from '../support/crr.js';
import { importPolicyAndWait } from '../support/datapathNode.js';
import { loadObjectsIn } from '../support/datapathLoad.js';
import { bpfConntrack, bpfMetrics, dropCounts } from '../support/datapathObserve.js';
import { NetnsPool } from '../support/netns.js';
import { networkPolicy } from '../support/policyDocuments.js';
import { requireRoot } from '../support/root.js';
import { upsertService } from '../support/serviceApi.js';
import { OUTSIDE_NODE_IP, type ServiceScene, startServiceScene } from '../support/serviceScene.js';

requireRoot('the upgrade test');

const VARIANT_DIR = join(DEFAULT_OBJECT_DIR, '..', 'bpf-variant');
const NS = 'tdl-upg';
const POD_CIDR = '10.241.0.0/24';
const TCP_PORT = 8080;
const CRR_PORT = 7000;
const NODE_PORT = 30090;
const NODE_PORT_CRR = 30091;
/** Echo rounds on each held connection before the first swap: its conntrack entry counts them. */
const ROUNDS_BEFORE = 20;
const CRR_SECONDS = 40;
/** A new connection every 2 ms or so: each swap happens with connections in flight. */
const CRR_PAUSE_US = 2000;

const pool = new NetnsPool('upg');
let scene: ServiceScene | undefined;
let crrServer: CrrServer | undefined;
const ip = (pod: string) => scene!.pod(pod).ip;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  scene = await startServiceScene(pool, {
    nodeName: 'tdl-node-upg',
    podCidr: POD_CIDR,
    namespace: NS,
    pods: [
      { name: 'backend', labels: { app: 'backend' } },
      { name: 'client', labels: { app: 'client' } },
      { name: 'guarded', labels: { app: 'guarded' } },
      { name: 'intruder', labels: { app: 'intruder' } },
    ],
    tcpPorts: [TCP_PORT],
    udpPorts: [],
    outside: true,
    // The other build's loader (datapathLoad) takes the pinned maps at the default sizes, as an upgraded agent would.
    defaultMapSizes: true,
  });
  const node = scene.node;
  await upsertService(node, 30, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT }, backends: [{ ip: ip('backend'), port: TCP_PORT }], trafficPolicy: 'Cluster' });
  await upsertService(node, 31, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_CRR }, backends: [{ ip: ip('backend'), port: CRR_PORT }], trafficPolicy: 'Cluster' });
  await importPolicyAndWait(node, networkPolicy(NS, 'guarded-from-client', 'podSelector: {matchLabels: {app: guarded}}\npolicyTypes: [Ingress]\ningress:\n- from: [{podSelector: {matchLabels: {app: client}}}]'));
  crrServer = await CrrServer.start(scene.pod('backend').netnsPath, [`0.0.0.0:${CRR_PORT}`], { threads: 1 });
});

after(async () => {
  await crrServer?.stop();
  if (scene) await scene.cleanup();
  else await pool.cleanup();
});

/** intruder → guarded: refused (timeout) by policy; counted, so the policy drops seen can be matched. */
let deniedProbes = 0;
async function denied(): Promise<boolean> {
  deniedProbes++;
  const r = await scene!.agent('intruder').tcpOnce({ dst: ip('guarded'), port: TCP_PORT }, 400);
  return r.outcome !== 'open';
}

async function allowed(): Promise<boolean> {
  return (await scene!.agent('client').tcpOnce({ dst: ip('guarded'), port: TCP_PORT }, 2000)).outcome === 'open';
}

test('connections survive an upgrade and a downgrade between builds whose conntrack and service layouts differ; the policy stays enforced', async (t) => {
  const node = scene!.node;
  const pinDir = join(node.bpffsRoot, 'tendril');
  assert.ok(await denied(), 'intruder -> guarded is denied at the start');
  assert.ok(await allowed(), 'client -> guarded is allowed at the start');

  // The node on the variant build: the agent stopped (as between a DaemonSet's old pod and its new one), its loader run.
  await node.agent.stop();
  const toVariant = await loadObjectsIn(node.nodePath, { pinDir, objectDir: VARIANT_DIR });
  t.diagnostic(`to the variant build: ${toVariant.ms.toFixed(0)} ms; ${JSON.stringify(toVariant.migrated)}`);

  // Traffic opened on the variant build's programs and maps.
  const pod = await scene!.agent('client').tcpOpen({ dst: ip('backend'), port: TCP_PORT });
  const nodePort = await scene!.agent('outside').tcpOpen({ dst: OUTSIDE_NODE_IP, port: NODE_PORT });
  assert.equal(pod.session.outcome, 'open', JSON.stringify(pod.session));
  assert.equal(nodePort.session.outcome, 'open', JSON.stringify(nodePort.session));
  const held = [
    { what: 'client -> backend', agent: scene!.agent('client'), handle: pod.handle, saddr: ip('client'), daddr: ip('backend'), dport: TCP_PORT },
    { what: 'outside -> NodePort', agent: scene!.agent('outside'), handle: nodePort.handle, saddr: scene!.outside!.addresses[0]!, daddr: OUTSIDE_NODE_IP, dport: NODE_PORT },
  ];
  for (let i = 0; i < ROUNDS_BEFORE; i++) for (const h of held) assert.equal((await h.agent.tcpAsk(h.handle)).outcome, 'open', h.what);
  deniedProbes = 0;
  const crr = runCrrClient(scene!.outside!.netnsPath, { destinations: [`${OUTSIDE_NODE_IP}:${NODE_PORT_CRR}`], seconds: CRR_SECONDS, threads: 1, timeoutMs: 3000, pauseUs: CRR_PAUSE_US });
  const broken: string[] = [];
  const passed: string[] = [];
  const checkpoint = async (phase: string) => {
    for (const h of held) {
      const r = await h.agent.tcpAsk(h.handle);
      if (r.outcome !== 'open') broken.push(`${phase}: ${h.what} ${r.outcome} ${r.detail ?? ''}`);
    }
    if (!(await denied())) passed.push(`${phase}: intruder reached guarded`);
    if (!(await allowed())) broken.push(`${phase}: client -> guarded refused`);
  };
  await sleep(2000);
  await checkpoint('on the variant build');

  // Upgrade: this build's agent starts on the variant's maps and programs.
  await node.agent.start();
  await checkpoint('after the upgrade');
  const ct = await bpfConntrack(node);
  for (const h of held) {
    // The only connection between these two on this port: the probes go elsewhere.
    const e = ct.find((r) => r.saddr === h.saddr && r.daddr === h.daddr && r.dport === h.dport && r.proto === 6);
    assert.ok(e, `${h.what}: its conntrack entry is there after the upgrade`);
    // One request each round at least (a NodePort flow's entry counts one direction); a new entry would hold the last round's few.
    assert.ok(e.packets >= ROUNDS_BEFORE, `${h.what}: the entry is the one from before the upgrade (${e.packets} packets counted, ${ROUNDS_BEFORE} or more before it)`);
  }
  await sleep(2000);

  // Downgrade: the variant build's loader takes the node back.
  await node.agent.stop();
  const back = await loadObjectsIn(node.nodePath, { pinDir, objectDir: VARIANT_DIR });
  t.diagnostic(`back to the variant build: ${back.ms.toFixed(0)} ms; ${JSON.stringify(back.migrated)}`);
  await checkpoint('after the downgrade');
  await sleep(2000);

  // And up again, with the agent.
  await node.agent.start();
  await checkpoint('after the second upgrade');

  const r = await crr;
  t.diagnostic(`crr from outside to the NodePort: ${r.connections} connections in ${r.seconds} s, errors: ${crrErrors(r)}, p99 ${r.latencyUs.p99} µs, max ${r.latencyUs.max} µs; per second ${r.perSecond.join(' ')}`);
  assert.deepEqual(broken, [], 'no held connection broke');
  assert.deepEqual(passed, [], 'no denied connection passed');
  assert.equal(r.errorCount, 0, `no new connection failed: ${crrErrors(r)}`);
  assert.ok(r.connections > CRR_SECONDS * 50, `new connections kept coming (${r.connections})`);
  // A client whose connection waits for a SYN retransmit (1 s) opens no other meanwhile: a second may pass without
  // one, never two in a row.
  const seconds = r.perSecond.slice(0, -1);
  assert.ok(seconds.every((n, i) => n > 0 || (seconds[i + 1] ?? 1) > 0), `never two seconds in a row without a new connection: ${r.perSecond.join(' ')}`);

  // The policy's drops are the intruder's SYNs (one per probe, retransmits aside), and the segments held back while
  // a swap's last pass carried the old programs' newest flows over (CT_MIGRATION: sent again by TCP); nothing else.
  const drops = dropCounts(await bpfMetrics(node));
  const other = Object.fromEntries(Object.entries(drops).filter(([k]) => !k.startsWith('POLICY') && !k.startsWith('CT_MIGRATION')));
  t.diagnostic(`drops counted: ${JSON.stringify(drops)}; intruder probes: ${deniedProbes}`);
  assert.deepEqual(other, {}, 'no drop of another reason');
  for (const h of held) await h.agent.tcpClose(h.handle);
});
