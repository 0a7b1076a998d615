// Traffic that crosses the node's devices: NodePorts and externalIPs reached
// from an outside host (the backend sees the client's own address, with
// trafficPolicy Cluster and Local alike), a NodePort whose backend is off the
// node (SNAT to the node), the node reaching a NodePort on its own address,
// and pods reaching servers outside the cluster masqueraded in BPF, their
// NAT entries garbage-collected once the flow is over.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { runOk } from '../support/run.js';
import { assertAllAnswered, ctOfFailed, decodeNatKey, snatEntries, upsertService } from '../support/serviceApi.js';
import { failures, shareByBackend } from '../support/serviceProcess.js';
import { OUTSIDE_CLIENT_IP, OUTSIDE_NODE_IP, REMOTE_HOST_IP, REMOTE_NODE_IP, type ServiceScene, startServiceScene } from '../support/serviceScene.js';
import { eventually } from '../support/datapathObserve.js';

requireRoot('the NodePort and masquerade tests');

const NS = 'tdl-svn';
const POD_CIDR = '10.243.0.0/24';
const TCP_PORT = 8080;
const UDP_PORT = 5353;
const BACKENDS = ['be-a', 'be-b'];
const NODE_PORT_CLUSTER = 30080;
const NODE_PORT_LOCAL = 30081;
const NODE_PORT_REMOTE = 30082;
const NODE_PORT_UDP = 30053;
/** NodePorts whose backends are be-a (on the node) and the remote host (off it). */
const NODE_PORT_MIXED_LOCAL = 30083;
const NODE_PORT_MIXED_CLUSTER = 30084;
/** Routed to the node by the outside host; no interface holds it. */
const EXTERNAL_IP = '10.200.0.100';
/** A LoadBalancer service's address, routed the same way. */
const LB_IP = '10.200.0.101';
/** An externalIP and a NodePort whose only backend is be-a (TCP and UDP alike). */
const EXTERNAL_IP_ONE = '10.200.0.102';
const NODE_PORT_ONE = 30085;
const NODE_ADDRESSES = [OUTSIDE_NODE_IP, REMOTE_NODE_IP];

const pool = new NetnsPool('svn');
let scene: ServiceScene | undefined;
const ip = (pod: string) => scene!.pod(pod).ip;

before(async () => {
  scene = await startServiceScene(pool, {
    nodeName: 'tdl-node-svn',
    podCidr: POD_CIDR,
    namespace: NS,
    pods: [...BACKENDS.map((name) => ({ name, labels: { app: 'backend', pod: name } })), { name: 'client', labels: { app: 'client' } }],
    tcpPorts: [TCP_PORT],
    udpPorts: [UDP_PORT],
    outside: true,
    remote: true,
  });
  await runOk(['ip', '-n', scene.outside!.netns, 'route', 'add', '10.200.0.0/24', 'via', OUTSIDE_NODE_IP]);
  const node = scene.node;
  const local = (port: number) => BACKENDS.map((b) => ({ ip: ip(b), port }));
  await upsertService(node, 10, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_CLUSTER }, backends: local(TCP_PORT), trafficPolicy: 'Cluster' });
  await upsertService(node, 11, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_LOCAL }, backends: local(TCP_PORT), trafficPolicy: 'Local' });
  await upsertService(node, 12, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_UDP, protocol: 'UDP' }, backends: local(UDP_PORT), trafficPolicy: 'Cluster' });
  await upsertService(node, 14, { type: 'ExternalIPs', frontend: { ip: EXTERNAL_IP, port: 80 }, backends: local(TCP_PORT) });
  await upsertService(node, 17, { type: 'LoadBalancer', frontend: { ip: LB_IP, port: 80 }, backends: local(TCP_PORT) });
  await upsertService(node, 18, { type: 'ExternalIPs', frontend: { ip: EXTERNAL_IP_ONE, port: 80 }, backends: [{ ip: ip('be-a'), port: TCP_PORT }] });
  await upsertService(node, 19, { type: 'ExternalIPs', frontend: { ip: EXTERNAL_IP_ONE, port: 53, protocol: 'UDP' }, backends: [{ ip: ip('be-a'), port: UDP_PORT }] });
  await upsertService(node, 20, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_ONE }, backends: [{ ip: ip('be-a'), port: TCP_PORT }] });
  await upsertService(node, 21, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_ONE, protocol: 'UDP' }, backends: [{ ip: ip('be-a'), port: UDP_PORT }] });
  const mixed = [
    { ip: ip('be-a'), port: TCP_PORT },
    { ip: REMOTE_HOST_IP, port: TCP_PORT },
  ];
  await upsertService(node, 15, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_MIXED_LOCAL }, backends: mixed, trafficPolicy: 'Local' });
  await upsertService(node, 16, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_MIXED_CLUSTER }, backends: mixed, trafficPolicy: 'Cluster' });
});

after(async () => {
  if (scene) await scene.cleanup();
  else await pool.cleanup();
});

describe('NodePort from an outside host', () => {
  for (const [policy, port] of [
    ['Cluster', NODE_PORT_CLUSTER],
    ['Local', NODE_PORT_LOCAL],
  ] as const) {
    test(`trafficPolicy ${policy}: local backends see the client's own address`, async () => {
      const sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port }, { count: 40, requests: 3, concurrency: 8 });
      await assertAllAnswered(scene!.node, sessions, `outside -> ${OUTSIDE_NODE_IP}:${port}`);
      const share = shareByBackend(sessions);
      assert.deepEqual([...share.keys()].sort(), BACKENDS, `both local backends take connections: ${JSON.stringify(Object.fromEntries(share))}`);
      const peers = [...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))];
      assert.deepEqual(peers, [OUTSIDE_CLIENT_IP], 'the source address reached the pod unchanged');
    });
  }

  test('UDP NodePort: answers come back from the node address, the backend saw the client', async () => {
    const shots = await scene!.agent('outside').udpShots({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_UDP }, { count: 40, concurrency: 8 });
    await assertAllAnswered(scene!.node, shots, `outside -> ${OUTSIDE_NODE_IP}:${NODE_PORT_UDP}/udp`);
    assert.deepEqual([...shareByBackend(shots).keys()].sort(), BACKENDS);
    assert.deepEqual([...new Set(shots.map((s) => s.answer!.peer))], [OUTSIDE_CLIENT_IP]);
  });

  test('externalIPs: reached from outside (the client address preserved) and from a pod', async () => {
    const sessions = await scene!.agent('outside').tcpSessions({ dst: EXTERNAL_IP, port: 80 }, { count: 20, requests: 2, concurrency: 5 });
    await assertAllAnswered(scene!.node, sessions, `outside -> ${EXTERNAL_IP}:80`);
    assert.deepEqual([...shareByBackend(sessions).keys()].sort(), BACKENDS);
    assert.deepEqual([...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))], [OUTSIDE_CLIENT_IP]);
    // From inside the cluster too, as kube-proxy does.
    const fromPod = await scene!.agent('client').tcpSessions({ dst: EXTERNAL_IP, port: 80 }, { count: 10, requests: 2, concurrency: 5 });
    await assertAllAnswered(scene!.node, fromPod, `client pod -> ${EXTERNAL_IP}:80`);
    assert.deepEqual([...new Set(fromPod.flatMap((s) => s.answers.map((a) => a.peer)))], [ip('client')]);
  });

  test('LoadBalancer: reached from outside, the client address preserved', async () => {
    const sessions = await scene!.agent('outside').tcpSessions({ dst: LB_IP, port: 80 }, { count: 20, requests: 2, concurrency: 5 });
    await assertAllAnswered(scene!.node, sessions, `outside -> ${LB_IP}:80`);
    assert.deepEqual([...shareByBackend(sessions).keys()].sort(), BACKENDS);
    assert.deepEqual([...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))], [OUTSIDE_CLIENT_IP]);
  });

  test('trafficPolicy Cluster to a backend off the node: SNAT to the node, the reply returns', async (t) => {
    await upsertService(scene!.node, 13, { type: 'NodePort', frontend: { ip: '0.0.0.0', port: NODE_PORT_REMOTE }, backends: [{ ip: REMOTE_HOST_IP, port: TCP_PORT }], trafficPolicy: 'Cluster' });
    const sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_REMOTE }, { count: 10, requests: 3, concurrency: 5 });
    await assertAllAnswered(scene!.node, sessions, `outside -> ${OUTSIDE_NODE_IP}:${NODE_PORT_REMOTE} (remote backend)`);
    const answers = sessions.flatMap((s) => s.answers);
    assert.ok(answers.every((a) => a.name === 'remote'));
    const peers = [...new Set(answers.map((a) => a.peer))];
    assert.equal(peers.length, 1, JSON.stringify(peers));
    assert.ok(NODE_ADDRESSES.includes(peers[0]!), `the remote backend saw a node address, not the client: ${peers[0]}`);
    t.diagnostic(`the remote backend saw ${peers[0]}`);
  });

  test('trafficPolicy Local with a local and a remote backend: only the local one is used', async () => {
    const sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_MIXED_LOCAL }, { count: 30, requests: 2, concurrency: 6 });
    await assertAllAnswered(scene!.node, sessions, `outside -> ${OUTSIDE_NODE_IP}:${NODE_PORT_MIXED_LOCAL} (Local, be-a + remote)`);
    assert.deepEqual(Object.fromEntries(shareByBackend(sessions)), { 'be-a': 30 }, 'external traffic stays on the node\'s backend');
    assert.deepEqual([...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))], [OUTSIDE_CLIENT_IP]);
  });

  test('trafficPolicy Cluster with a local and a remote backend: the local one sees the client, the remote one the node', async () => {
    const sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_MIXED_CLUSTER }, { count: 30, requests: 2, concurrency: 6 });
    await assertAllAnswered(scene!.node, sessions, `outside -> ${OUTSIDE_NODE_IP}:${NODE_PORT_MIXED_CLUSTER} (Cluster, be-a + remote)`);
    assert.deepEqual([...shareByBackend(sessions).keys()].sort(), ['be-a', 'remote']);
    const seenBy = (name: string) => [...new Set(sessions.flatMap((s) => s.answers.filter((a) => a.name === name).map((a) => a.peer)))];
    assert.deepEqual(seenBy('be-a'), [OUTSIDE_CLIENT_IP]);
    assert.equal(seenBy('remote').length, 1);
    assert.ok(NODE_ADDRESSES.includes(seenBy('remote')[0]!), `the remote backend saw ${seenBy('remote')[0]}`);
  });
});

test('an outside client port reused toward another frontend with the same backend: answers come from the frontend it addressed', async () => {
  // Both flows translate to the same tuple (outside:port -> be-a): the second must not take the first's conntrack entry and its frontend.
  const out = scene!.agent('outside');
  const outcome = async (kind: 'tcp' | 'udp', srcPort: number, dst: string, port: number) => {
    const r = kind === 'tcp' ? await out.tcpSessions({ dst, port, srcPort }, { count: 1, requests: 2, concurrency: 1, timeoutMs: 1500 }) : await out.udpShots({ dst, port, srcPort }, { count: 1, concurrency: 1, timeoutMs: 1500 });
    return failures(r);
  };
  const seen = {
    tcpFirst: await outcome('tcp', 41_001, EXTERNAL_IP_ONE, 80),
    tcpSecond: await outcome('tcp', 41_001, OUTSIDE_NODE_IP, NODE_PORT_ONE),
    udpFirst: await outcome('udp', 41_002, EXTERNAL_IP_ONE, 53),
    udpSecond: await outcome('udp', 41_002, OUTSIDE_NODE_IP, NODE_PORT_ONE),
    // The direct flow (the outside host routes the pod CIDR through the node) on the tuple a NodePort flow translated to.
    udpDirect: await outcome('udp', 41_002, ip('be-a'), UDP_PORT),
  };
  assert.deepEqual(seen, { tcpFirst: 'none', tcpSecond: 'none', udpFirst: 'none', udpSecond: 'none', udpDirect: 'none' }, `outside:41001 ${EXTERNAL_IP_ONE}:80 then ${OUTSIDE_NODE_IP}:${NODE_PORT_ONE}; outside:41002 the same over UDP, then be-a:${UDP_PORT} directly`);
});

test('a pod reaches a NodePort on the node address; a Local one uses every backend from inside', async () => {
  const client = scene!.agent('client');
  const plain = await client.tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLUSTER }, { count: 20, requests: 2, concurrency: 5 });
  await assertAllAnswered(scene!.node, plain, `client pod -> ${OUTSIDE_NODE_IP}:${NODE_PORT_CLUSTER}`);
  assert.deepEqual([...shareByBackend(plain).keys()].sort(), BACKENDS);
  assert.deepEqual([...new Set(plain.flatMap((s) => s.answers.map((a) => a.peer)))], [ip('client')], 'a local backend sees the client pod');
  // externalTrafficPolicy is about external traffic: from a pod, the internal scope lists the remote backend too.
  const local = await client.tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_MIXED_LOCAL }, { count: 30, requests: 2, concurrency: 6 });
  await assertAllAnswered(scene!.node, local, `client pod -> ${OUTSIDE_NODE_IP}:${NODE_PORT_MIXED_LOCAL}`);
  assert.deepEqual([...shareByBackend(local).keys()].sort(), ['be-a', 'remote']);
});

test('the node reaches a NodePort on its own address', async (t) => {
  const sessions = await scene!.agent('node').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLUSTER }, { count: 20, requests: 2, concurrency: 5 });
  await assertAllAnswered(scene!.node, sessions, `node -> ${OUTSIDE_NODE_IP}:${NODE_PORT_CLUSTER}`);
  assert.ok(sessions.every((s) => BACKENDS.includes(s.answers[0]!.name)));
  t.diagnostic(`the backends saw ${JSON.stringify([...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))])}`);
});

describe('masquerade in BPF', () => {
  test('a pod reaching servers outside the cluster is seen as the node; replies come back (TCP, UDP)', async () => {
    const client = scene!.agent('client');
    for (const [dst, nodeIp, name] of [
      [REMOTE_HOST_IP, REMOTE_NODE_IP, 'remote'],
      [OUTSIDE_CLIENT_IP, OUTSIDE_NODE_IP, 'outside'],
    ] as const) {
      const sessions = await client.tcpSessions({ dst, port: TCP_PORT }, { count: 10, requests: 3, concurrency: 5 });
      await assertAllAnswered(scene!.node, sessions, `client -> ${dst}:${TCP_PORT}`);
      const answers = sessions.flatMap((s) => s.answers);
      assert.ok(answers.every((a) => a.name === name));
      assert.deepEqual([...new Set(answers.map((a) => a.peer))], [nodeIp], `${name} saw the node's address on the way out, not the pod's`);
      const shots = await client.udpShots({ dst, port: UDP_PORT }, { count: 10, concurrency: 5 });
      await assertAllAnswered(scene!.node, shots, `client -> ${dst}:${UDP_PORT} over UDP`);
      assert.deepEqual([...new Set(shots.map((s) => s.answer!.peer))], [nodeIp]);
    }
  });

  test('an ICMP error for a masqueraded flow reaches the pod: UDP to a closed port outside gets ECONNREFUSED', async () => {
    const shots = await scene!.agent('client').udpShots({ dst: REMOTE_HOST_IP, port: 5999 }, { count: 2, concurrency: 1, timeoutMs: 1500 });
    assert.deepEqual(shots.map((x) => x.outcome), ['refused', 'refused'], `the remote's port unreachable, addressed to the node, must be translated back to the pod: ${failures(shots)}`);
  });

  test('inside the masquerade CIDRs no SNAT: a pod reaching another pod is seen as itself', async () => {
    const s = await scene!.agent('client').tcpOnce({ dst: ip('be-a'), port: TCP_PORT });
    assert.equal(s.outcome, 'open', await ctOfFailed(scene!.node, [s]));
    assert.equal(s.answers[0]!.peer, ip('client'));
  });

  test('the NAT entries of a finished flow are garbage-collected', async (t) => {
    const PORT_OF_TEST = TCP_PORT;
    const mine = async () =>
      (await snatEntries(scene!.node)).map((e) => decodeNatKey(e.key)).filter((k) => k.proto === 6 && (k.dport === PORT_OF_TEST || k.sport === PORT_OF_TEST) && (k.saddr === REMOTE_HOST_IP || k.daddr === REMOTE_HOST_IP));
    const sessions = await scene!.agent('client').tcpSessions({ dst: REMOTE_HOST_IP, port: PORT_OF_TEST }, { count: 3, requests: 2, concurrency: 3 });
    await assertAllAnswered(scene!.node, sessions, `client -> ${REMOTE_HOST_IP}:${PORT_OF_TEST}`);
    const live = await mine();
    const sample = (rows: readonly unknown[]) => `${rows.length} entries, e.g. ${JSON.stringify(rows.slice(0, 3))}`;
    t.diagnostic(`SNAT entries of closed flows to ${REMOTE_HOST_IP}:${PORT_OF_TEST}: ${sample(live)}`);
    const ports = sessions.map((x) => x.localPort);
    const egress = live.filter((k) => k.saddr === ip('client') && ports.includes(k.sport));
    assert.equal(egress.length, 3, `each masqueraded flow has its EGRESS mapping (source ports ${JSON.stringify(ports)}): ${sample(live)}`);
    // The connections are closed: conntrack gives them the closing lifetime (10 s); `bpf ct gc` then takes the entries, and NAT GC follows.
    let left = live;
    const tookMs = await eventually(
      async () => {
        const gc = await scene!.node.cli(['bpf', 'ct', 'gc']);
        assert.equal(gc.code, 0, `tendril bpf ct gc: ${gc.stderr}${gc.stdout}`);
        left = await mine();
        return left.length === 0;
      },
      40_000,
      `SNAT entries for the closed flows to ${REMOTE_HOST_IP}:${PORT_OF_TEST} are removed`,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; left: ${sample(left)}`);
    });
    t.diagnostic(`NAT entries gone ${tookMs} ms after the flows closed`);
  });
});
