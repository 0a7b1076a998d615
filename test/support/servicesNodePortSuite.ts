// Traffic that crosses the node's devices. From an outside host: NodePorts
// (Cluster and Local; a local backend sees the client's own address, a
// backend off the node sees the node's), externalIPs, a LoadBalancer address,
// ICMP errors translated back, a client port reused between frontends, and
// policy at the backend. From pods and the node: NodePorts on node addresses
// (hairpin included), a ClusterIP whose backend is off the node. Pods reaching
// servers outside the cluster masqueraded in BPF (TCP, UDP, ICMP echo and
// errors), their NAT entries garbage-collected once the flow is over.
// One suite for every family (family.ts): the wrappers
// test/e2e/servicesNodePort*.test.ts run it on IPv4, IPv6 and dual-stack
// pods (on dual-stack every row on both IP versions). NodePorts are on
// every node address of the family: 0.0.0.0, and :: (which the agent serves
// as one frontend per node IPv6 address).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { LB_HAIRPIN_IP4, LB_HAIRPIN_IP6, NAT_PORT_MAX, NAT_PORT_MIN } from '../../src/datapath/bpf/constants.js';
import { cliJson, deletePolicyAndWait, importPolicyAndWait } from './datapathNode.js';
import { bpfMetrics, dropCounts, eventually } from './datapathObserve.js';
import { cidrIn, type Family, type IpFamily, ipIn, versionsOf } from './family.js';
import { NetnsPool } from './netns.js';
import { networkPolicy } from './policyDocuments.js';
import { requireRoot } from './root.js';
import { runOk } from './run.js';
import { assertAllAnswered, ctOfFailed, decodeNatKey, getService, snatEntries, upsertService } from './serviceApi.js';
import { failures, shareByBackend } from './serviceProcess.js';
import {
  OUTSIDE_CLIENT_IP as OUTSIDE_CLIENT_T,
  OUTSIDE_NODE_IP as OUTSIDE_NODE_T,
  REMOTE_HOST_IP as REMOTE_HOST_T,
  REMOTE_NODE_IP as REMOTE_NODE_T,
  rowTitle,
  type ServiceScene,
  serviceId,
  startServiceScene,
} from './serviceScene.js';

const NS = 'tdl-svn';
/** IPv4 templates (family.ts mirrors them on IPv6). */
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
const EXTERNAL_IP_T = '10.200.0.100';
/** A LoadBalancer service's address, routed the same way. */
const LB_IP_T = '10.200.0.101';
/** An externalIP and a NodePort whose only backend is be-a (TCP and UDP alike). */
const EXTERNAL_IP_ONE_T = '10.200.0.102';
const NODE_PORT_ONE = 30085;
/** UDP NodePorts whose backend port is closed: on the node (be-a), off it (remote). */
const NODE_PORT_CLOSED_LOCAL = 30086;
const NODE_PORT_CLOSED_REMOTE = 30087;
const CLOSED_PORT = 5999;
/** A ClusterIP whose only backend is the remote host (off the node). */
const VIP_REMOTE_T = '10.96.2.10';
/** A NodePort whose only backend is the client pod itself. */
const NODE_PORT_HAIRPIN = 30088;
/** A Local NodePort whose only backend is off the node. */
const NODE_PORT_LOCAL_NONE = 30089;
const NAT_PORTS = NAT_PORT_MAX - NAT_PORT_MIN + 1;

/** The NodePort frontend of IP version `v`: every node address of the family. */
const nodePortAddress = (v: IpFamily) => (v === 4 ? '0.0.0.0' : '::');
/** The source a pod sees when it reached itself through a service. */
const hairpinIp = (v: IpFamily) => (v === 4 ? LB_HAIRPIN_IP4 : LB_HAIRPIN_IP6);

/** The NodePort suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function servicesNodePortSuite(family: Family, tag: string): void {
  requireRoot('the NodePort and masquerade tests');
  const pool = new NetnsPool(tag);
  let scene: ServiceScene | undefined;

  /** The addresses and services of IP version `v`. */
  function on(v: IpFamily) {
    return {
      ip: (pod: string) => scene!.podIp(pod, v),
      id: (n: number) => serviceId(v, n),
      title: (t: string) => rowTitle(family, v, t),
      ANY: nodePortAddress(v),
      OUTSIDE_NODE_IP: ipIn(v, OUTSIDE_NODE_T),
      OUTSIDE_CLIENT_IP: ipIn(v, OUTSIDE_CLIENT_T),
      REMOTE_NODE_IP: ipIn(v, REMOTE_NODE_T),
      REMOTE_HOST_IP: ipIn(v, REMOTE_HOST_T),
      EXTERNAL_IP: ipIn(v, EXTERNAL_IP_T),
      LB_IP: ipIn(v, LB_IP_T),
      EXTERNAL_IP_ONE: ipIn(v, EXTERNAL_IP_ONE_T),
      VIP_REMOTE: ipIn(v, VIP_REMOTE_T),
      NODE_ADDRESSES: [ipIn(v, OUTSIDE_NODE_T), ipIn(v, REMOTE_NODE_T)],
    };
  }

  /** Every service of IP version `v`. */
  async function servicesOf(v: IpFamily): Promise<void> {
    const { ip, id, ANY, OUTSIDE_NODE_IP, REMOTE_HOST_IP, EXTERNAL_IP, LB_IP, EXTERNAL_IP_ONE, VIP_REMOTE } = on(v);
    await runOk(['ip', '-n', scene!.outside!.netns, `-${v}`, 'route', 'add', cidrIn(v, '10.200.0.0/24'), 'via', OUTSIDE_NODE_IP]);
    const node = scene!.node;
    const local = (port: number) => BACKENDS.map((b) => ({ ip: ip(b), port }));
    await upsertService(node, id(10), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_CLUSTER }, backends: local(TCP_PORT), trafficPolicy: 'Cluster' });
    await upsertService(node, id(11), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_LOCAL }, backends: local(TCP_PORT), trafficPolicy: 'Local' });
    await upsertService(node, id(12), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_UDP, protocol: 'UDP' }, backends: local(UDP_PORT), trafficPolicy: 'Cluster' });
    await upsertService(node, id(14), { type: 'ExternalIPs', frontend: { ip: EXTERNAL_IP, port: 80 }, backends: local(TCP_PORT) });
    await upsertService(node, id(17), { type: 'LoadBalancer', frontend: { ip: LB_IP, port: 80 }, backends: local(TCP_PORT) });
    await upsertService(node, id(18), { type: 'ExternalIPs', frontend: { ip: EXTERNAL_IP_ONE, port: 80 }, backends: [{ ip: ip('be-a'), port: TCP_PORT }] });
    await upsertService(node, id(19), { type: 'ExternalIPs', frontend: { ip: EXTERNAL_IP_ONE, port: 53, protocol: 'UDP' }, backends: [{ ip: ip('be-a'), port: UDP_PORT }] });
    await upsertService(node, id(20), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_ONE }, backends: [{ ip: ip('be-a'), port: TCP_PORT }] });
    await upsertService(node, id(21), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_ONE, protocol: 'UDP' }, backends: [{ ip: ip('be-a'), port: UDP_PORT }] });
    await upsertService(node, id(22), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_CLOSED_LOCAL, protocol: 'UDP' }, backends: [{ ip: ip('be-a'), port: CLOSED_PORT }] });
    await upsertService(node, id(23), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_CLOSED_REMOTE, protocol: 'UDP' }, backends: [{ ip: REMOTE_HOST_IP, port: CLOSED_PORT }] });
    await upsertService(node, id(24), { frontend: { ip: VIP_REMOTE, port: 80 }, backends: [{ ip: REMOTE_HOST_IP, port: TCP_PORT }] });
    await upsertService(node, id(25), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_HAIRPIN }, backends: [{ ip: ip('client'), port: TCP_PORT }] });
    await upsertService(node, id(26), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_LOCAL_NONE }, backends: [{ ip: REMOTE_HOST_IP, port: TCP_PORT }], trafficPolicy: 'Local' });
    const mixed = [
      { ip: ip('be-a'), port: TCP_PORT },
      { ip: REMOTE_HOST_IP, port: TCP_PORT },
    ];
    await upsertService(node, id(15), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_MIXED_LOCAL }, backends: mixed, trafficPolicy: 'Local' });
    await upsertService(node, id(16), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_MIXED_CLUSTER }, backends: mixed, trafficPolicy: 'Cluster' });
  }

  before(async () => {
    scene = await startServiceScene(pool, {
      nodeName: `tdl-node-${tag}`,
      family,
      podCidr: POD_CIDR,
      namespace: NS,
      pods: [...BACKENDS.map((name) => ({ name, labels: { app: 'backend', pod: name } })), { name: 'client', labels: { app: 'client' } }],
      tcpPorts: [TCP_PORT],
      udpPorts: [UDP_PORT],
      outside: true,
      remote: true,
      // The exhaustion test fills SNAT's ports with a few thousand datagrams: one range, wholly outside the node's own ports.
      extraAgentArgs: ['--bpf-nat-port-range', `${NAT_PORT_MIN}-${NAT_PORT_MAX}`],
    });
    for (const v of scene.versions) await servicesOf(v);
  });

  after(async () => {
    if (scene) await scene.cleanup();
    else await pool.cleanup();
  });

  for (const v of versionsOf(family)) rowsOn(v);

  /** Every row on IP version `v`. */
  function rowsOn(v: IpFamily): void {
    /** A row whose traffic arrives from outside: todo on an IPv6-only node (a dual-stack node has devices: its IPv6 rows run). */
    const { ip, id, title, ANY, OUTSIDE_NODE_IP, OUTSIDE_CLIENT_IP, REMOTE_NODE_IP, REMOTE_HOST_IP, EXTERNAL_IP, LB_IP, EXTERNAL_IP_ONE, VIP_REMOTE, NODE_ADDRESSES } = on(v);

    describe('NodePort from an outside host', () => {
      for (const [policy, port] of [
        ['Cluster', NODE_PORT_CLUSTER],
        ['Local', NODE_PORT_LOCAL],
      ] as const) {
        test(title(`trafficPolicy ${policy}: local backends see the client's own address`), {}, async () => {
          const sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port }, { count: 40, requests: 3, concurrency: 8 });
          await assertAllAnswered(scene!.node, sessions, `outside -> ${OUTSIDE_NODE_IP}:${port}`);
          const share = shareByBackend(sessions);
          assert.deepEqual([...share.keys()].sort(), BACKENDS, `both local backends take connections: ${JSON.stringify(Object.fromEntries(share))}`);
          const peers = [...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))];
          assert.deepEqual(peers, [OUTSIDE_CLIENT_IP], 'the source address reached the pod unchanged');
        });
      }

      test(title('UDP NodePort: answers come back from the node address, the backend saw the client'), {}, async () => {
        const shots = await scene!.agent('outside').udpShots({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_UDP }, { count: 40, concurrency: 8 });
        await assertAllAnswered(scene!.node, shots, `outside -> ${OUTSIDE_NODE_IP}:${NODE_PORT_UDP}/udp`);
        assert.deepEqual([...shareByBackend(shots).keys()].sort(), BACKENDS);
        assert.deepEqual([...new Set(shots.map((s) => s.answer!.peer))], [OUTSIDE_CLIENT_IP]);
      });

      test(title('UDP NodePort to a closed backend port: the outside client gets ECONNREFUSED'), {}, async () => {
        const local = await scene!.agent('outside').udpShots({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLOSED_LOCAL }, { count: 2, concurrency: 1, timeoutMs: 1500 });
        assert.deepEqual(local.map((x) => x.outcome), ['refused', 'refused'], 'the ICMP port unreachable, translated back to quote the NodePort frontend');
      });

      test(title('UDP NodePort to a closed port of a backend off the node: the outside client gets ECONNREFUSED'), {}, async () => {
        const remote = await scene!.agent('outside').udpShots({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLOSED_REMOTE }, { count: 2, concurrency: 1, timeoutMs: 1500 });
        assert.deepEqual(remote.map((x) => x.outcome), ['refused', 'refused'], 'the remote backend\'s ICMP port unreachable, translated back to quote the NodePort frontend');
      });

      test(title('externalIPs: reached from outside (the client address preserved) and from a pod'), {}, async () => {
        const sessions = await scene!.agent('outside').tcpSessions({ dst: EXTERNAL_IP, port: 80 }, { count: 20, requests: 2, concurrency: 5 });
        await assertAllAnswered(scene!.node, sessions, `outside -> ${EXTERNAL_IP}:80`);
        assert.deepEqual([...shareByBackend(sessions).keys()].sort(), BACKENDS);
        assert.deepEqual([...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))], [OUTSIDE_CLIENT_IP]);
        // From inside the cluster too, as kube-proxy does.
        const fromPod = await scene!.agent('client').tcpSessions({ dst: EXTERNAL_IP, port: 80 }, { count: 10, requests: 2, concurrency: 5 });
        await assertAllAnswered(scene!.node, fromPod, `client pod -> ${EXTERNAL_IP}:80`);
        assert.deepEqual([...new Set(fromPod.flatMap((s) => s.answers.map((a) => a.peer)))], [ip('client')]);
      });

      test(title('externalIPs and LoadBalancer addresses reached from the node itself'), {}, async () => {
        const node = scene!.agent('node');
        const seen: Record<string, string> = {};
        for (const dst of [EXTERNAL_IP, LB_IP]) seen[dst] = failures(await node.tcpSessions({ dst, port: 80 }, { count: 5, requests: 1, concurrency: 5, timeoutMs: 1500 }));
        assert.deepEqual(seen, { [EXTERNAL_IP]: 'none', [LB_IP]: 'none' }, 'node -> externalIP / LoadBalancer :80');
      });

      test(title('LoadBalancer: reached from outside, the client address preserved'), {}, async () => {
        const sessions = await scene!.agent('outside').tcpSessions({ dst: LB_IP, port: 80 }, { count: 20, requests: 2, concurrency: 5 });
        await assertAllAnswered(scene!.node, sessions, `outside -> ${LB_IP}:80`);
        assert.deepEqual([...shareByBackend(sessions).keys()].sort(), BACKENDS);
        assert.deepEqual([...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))], [OUTSIDE_CLIENT_IP]);
      });

      test(title('trafficPolicy Cluster to a backend off the node: SNAT to the node, the reply returns'), {}, async (t) => {
        await upsertService(scene!.node, id(13), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_REMOTE }, backends: [{ ip: REMOTE_HOST_IP, port: TCP_PORT }], trafficPolicy: 'Cluster' });
        const sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_REMOTE }, { count: 10, requests: 3, concurrency: 5 });
        await assertAllAnswered(scene!.node, sessions, `outside -> ${OUTSIDE_NODE_IP}:${NODE_PORT_REMOTE} (remote backend)`);
        const answers = sessions.flatMap((s) => s.answers);
        assert.ok(answers.every((a) => a.name === 'remote'));
        const peers = [...new Set(answers.map((a) => a.peer))];
        assert.equal(peers.length, 1, JSON.stringify(peers));
        assert.ok(NODE_ADDRESSES.includes(peers[0]!), `the remote backend saw a node address, not the client: ${peers[0]}`);
        t.diagnostic(`the remote backend saw ${peers[0]}`);
      });

      test(title('trafficPolicy Local with a local and a remote backend: only the local one is used'), {}, async () => {
        const sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_MIXED_LOCAL }, { count: 30, requests: 2, concurrency: 6 });
        await assertAllAnswered(scene!.node, sessions, `outside -> ${OUTSIDE_NODE_IP}:${NODE_PORT_MIXED_LOCAL} (Local, be-a + remote)`);
        assert.deepEqual(Object.fromEntries(shareByBackend(sessions)), { 'be-a': 30 }, 'external traffic stays on the node\'s backend');
        assert.deepEqual([...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))], [OUTSIDE_CLIENT_IP]);
      });

      test(title('trafficPolicy Local without a backend on the node: external traffic is dropped (NO_SERVICE), a pod still gets through'), {}, async () => {
        const before = dropCounts(await bpfMetrics(scene!.node));
        const r = await scene!.agent('outside').tcpOnce({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_LOCAL_NONE }, 700);
        const after = dropCounts(await bpfMetrics(scene!.node));
        const noService = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('NO_SERVICE')).reduce((sum, [, v]) => sum + v, 0);
        assert.notEqual(r.outcome, 'open', `outside -> Local NodePort without a local backend: ${JSON.stringify(r.answers)}`);
        assert.ok(noService(after) > noService(before), `counted as NO_SERVICE: ${JSON.stringify(before)} -> ${JSON.stringify(after)} (client saw ${r.outcome})`);
        const fromPod = await scene!.agent('client').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_LOCAL_NONE }, { count: 3, requests: 1, concurrency: 3 });
        await assertAllAnswered(scene!.node, fromPod, 'client pod -> Local NodePort (internal scope: every backend)');
      });

      test(title('trafficPolicy Cluster with a local and a remote backend: the local one sees the client, the remote one the node'), {}, async () => {
        const sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_MIXED_CLUSTER }, { count: 30, requests: 2, concurrency: 6 });
        await assertAllAnswered(scene!.node, sessions, `outside -> ${OUTSIDE_NODE_IP}:${NODE_PORT_MIXED_CLUSTER} (Cluster, be-a + remote)`);
        assert.deepEqual([...shareByBackend(sessions).keys()].sort(), ['be-a', 'remote']);
        const seenBy = (name: string) => [...new Set(sessions.flatMap((s) => s.answers.filter((a) => a.name === name).map((a) => a.peer)))];
        assert.deepEqual(seenBy('be-a'), [OUTSIDE_CLIENT_IP]);
        assert.equal(seenBy('remote').length, 1);
        assert.ok(NODE_ADDRESSES.includes(seenBy('remote')[0]!), `the remote backend saw ${seenBy('remote')[0]}`);
      });
    });

    test(title('an outside client port reused toward another frontend with the same backend: answers come from the frontend it addressed'), {}, async () => {
      // Both flows translate to the same tuple (outside:port -> be-a): the second must not take the first's conntrack entry and its frontend.
      const out = scene!.agent('outside');
      const outcome = async (kind: 'tcp' | 'udp', srcPort: number, dst: string, port: number) => {
        const r = kind === 'tcp' ? await out.tcpSessions({ dst, port, srcPort }, { count: 1, requests: 2, concurrency: 1, timeoutMs: 1500 }) : await out.udpShots({ dst, port, srcPort }, { count: 1, concurrency: 1, timeoutMs: 1500 });
        return failures(r);
      };
      const seen = {
        tcpFirst: await outcome('tcp', 21_001, EXTERNAL_IP_ONE, 80),
        tcpSecond: await outcome('tcp', 21_001, OUTSIDE_NODE_IP, NODE_PORT_ONE),
        udpFirst: await outcome('udp', 21_002, EXTERNAL_IP_ONE, 53),
        udpSecond: await outcome('udp', 21_002, OUTSIDE_NODE_IP, NODE_PORT_ONE),
      };
      assert.deepEqual(seen, { tcpFirst: 'none', tcpSecond: 'none', udpFirst: 'none', udpSecond: 'none' }, `outside:21001 ${EXTERNAL_IP_ONE}:80 then ${OUTSIDE_NODE_IP}:${NODE_PORT_ONE}; outside:21002 the same over UDP`);
    });

    test(title('an outside client\'s direct flow on the tuple a NodePort flow translated to: the pod\'s answer comes from the pod'), {}, async () => {
      // The outside host routes the pod CIDR through the node: outside:21003 -> NodePort (translated to outside:21003 -> be-a), then outside:21003 -> be-a directly.
      const out = scene!.agent('outside');
      const first = await out.udpShots({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_ONE, srcPort: 21_003 }, { count: 1, concurrency: 1, timeoutMs: 1500 });
      await assertAllAnswered(scene!.node, first, `outside:21003 -> ${OUTSIDE_NODE_IP}:${NODE_PORT_ONE}`);
      const direct = await out.udpShots({ dst: ip('be-a'), port: UDP_PORT, srcPort: 21_003 }, { count: 1, concurrency: 1, timeoutMs: 1500 });
      assert.equal(failures(direct), 'none', `outside:21003 -> be-a:${UDP_PORT} straight after the NodePort flow on the same tuple`);
    });

    test(title('a pod reaches a NodePort on the node address; a Local one uses every backend from inside'), async () => {
      const client = scene!.agent('client');
      const plain = await client.tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLUSTER }, { count: 20, requests: 2, concurrency: 5 });
      await assertAllAnswered(scene!.node, plain, `client pod -> ${OUTSIDE_NODE_IP}:${NODE_PORT_CLUSTER}`);
      assert.deepEqual([...shareByBackend(plain).keys()].sort(), BACKENDS);
      assert.deepEqual([...new Set(plain.flatMap((s) => s.answers.map((a) => a.peer)))], [ip('client')], 'a local backend sees the client pod');
      // externalTrafficPolicy is about external traffic: from a pod, the internal scope lists the remote backend too.
      const local = await client.tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_MIXED_LOCAL }, { count: 30, requests: 2, concurrency: 6 });
      await assertAllAnswered(scene!.node, local, `client pod -> ${OUTSIDE_NODE_IP}:${NODE_PORT_MIXED_LOCAL}`);
      assert.deepEqual([...shareByBackend(local).keys()].sort(), ['be-a', 'remote']);
      // Hairpin through a NodePort: the pod is the service's only backend.
      const hairpin = await client.tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_HAIRPIN }, { count: 5, requests: 2, concurrency: 5 });
      await assertAllAnswered(scene!.node, hairpin, `client pod -> ${OUTSIDE_NODE_IP}:${NODE_PORT_HAIRPIN} (itself)`);
      assert.deepEqual([...new Set(hairpin.flatMap((x) => x.answers.map((a) => `${a.name} saw ${a.peer}`)))], [`client saw ${hairpinIp(v)}`]);
    });

    test(title('a NodePort on every node address: a pod reaches it on the node\'s address toward the remote host too'), async () => {
      const other = await scene!.agent('client').tcpSessions({ dst: REMOTE_NODE_IP, port: NODE_PORT_CLUSTER }, { count: 10, requests: 2, concurrency: 5 });
      await assertAllAnswered(scene!.node, other, `client pod -> ${REMOTE_NODE_IP}:${NODE_PORT_CLUSTER}`);
      // The API shows the service as it was made; the maps hold 0.0.0.0 once, or :: as one frontend per node IPv6 address under IDs of their own.
      assert.equal((await getService(scene!.node, id(10)))['frontend-address'].ip, ANY);
      const lb = await cliJson<{ services: Array<{ id: number; address: string; port: number; scope: string }> }>(scene!.node, ['bpf', 'lb', 'list']);
      const entries = lb.services.filter((x) => x.port === NODE_PORT_CLUSTER && x.scope === 'external' && x.address.includes(':') === (v === 6));
      const ids = new Map(entries.map((x) => [x.address, x.id]));
      if (v === 4) {
        assert.deepEqual([...ids], [['0.0.0.0', id(10)]]);
        return;
      }
      assert.ok(!ids.has('::'), `no wildcard IPv6 entry: ${JSON.stringify([...ids])}`);
      for (const a of NODE_ADDRESSES) assert.ok(ids.has(a), `bpf lb list holds [${a}]:${NODE_PORT_CLUSTER}: ${JSON.stringify([...ids])}`);
      assert.equal(new Set(ids.values()).size, ids.size, 'each node address its own ID (reverse NAT index)');
      assert.ok([...ids.values()].includes(id(10)), 'one of them under the service\'s own ID');
      // A NodePort named on one of those addresses, same port and protocol, is refused while :: holds it.
      await assert.rejects(
        upsertService(scene!.node, id(90), { type: 'NodePort', frontend: { ip: OUTSIDE_NODE_IP, port: NODE_PORT_CLUSTER }, backends: [{ ip: ip('be-a'), port: TCP_PORT }] }),
        (err: unknown) => (err as { status?: number }).status === 409 && /already belongs to service/.test((err as Error).message),
      );
    });

    test(title('a ClusterIP whose backend is off the node, from a pod and from the node: SNAT out, the reply translated back'), {}, async (t) => {
      const fromPod = await scene!.agent('client').tcpSessions({ dst: VIP_REMOTE, port: 80 }, { count: 10, requests: 2, concurrency: 5 });
      const fromNode = await scene!.agent('node').tcpSessions({ dst: VIP_REMOTE, port: 80 }, { count: 10, requests: 2, concurrency: 5 });
      t.diagnostic(`remote saw: from the pod ${JSON.stringify([...new Set(fromPod.flatMap((x) => x.answers.map((a) => a.peer)))])}, from the node ${JSON.stringify([...new Set(fromNode.flatMap((x) => x.answers.map((a) => a.peer)))])}`);
      assert.deepEqual({ fromPod: failures(fromPod), fromNode: failures(fromNode) }, { fromPod: 'none', fromNode: 'none' }, `-> ${VIP_REMOTE}:80 (backend ${REMOTE_HOST_IP}:${TCP_PORT})`);
      assert.ok([...fromPod, ...fromNode].every((x) => x.answers.every((a) => a.name === 'remote' && NODE_ADDRESSES.includes(a.peer))), 'the remote backend saw a node address');
    });

    test(title('the node reaches a NodePort on its own address'), {}, async (t) => {
      const sessions = await scene!.agent('node').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLUSTER }, { count: 20, requests: 2, concurrency: 5 });
      await assertAllAnswered(scene!.node, sessions, `node -> ${OUTSIDE_NODE_IP}:${NODE_PORT_CLUSTER}`);
      assert.ok(sessions.every((s) => BACKENDS.includes(s.answers[0]!.name)));
      t.diagnostic(`the backends saw ${JSON.stringify([...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))])}`);
      // With a backend on the node and one off it, the node's own connections over lo can only use the one on the node.
      const mixed = await scene!.agent('node').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_MIXED_CLUSTER }, { count: 20, requests: 2, concurrency: 5 });
      await assertAllAnswered(scene!.node, mixed, `node -> ${OUTSIDE_NODE_IP}:${NODE_PORT_MIXED_CLUSTER} (be-a + remote)`);
      assert.deepEqual(Object.fromEntries(shareByBackend(mixed)), { 'be-a': 20 });
    });

    test(title('policy holds for NodePort traffic: the backends\' ingress policy sees the outside client, not the node'), {}, async () => {
      const policy = networkPolicy(NS, 'backend-from-client', 'podSelector: {matchLabels: {app: backend}}\npolicyTypes: [Ingress]\ningress:\n- from: [{podSelector: {matchLabels: {app: client}}}]');
      await importPolicyAndWait(scene!.node, policy);
      try {
        const denied = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLUSTER }, { count: 4, requests: 1, concurrency: 4, timeoutMs: 700 });
        assert.deepEqual(denied.map((x) => x.outcome), Array(4).fill('timeout'), `outside -> NodePort: the backends admit app=client only: ${failures(denied)} ${JSON.stringify(denied.flatMap((x) => x.answers))}`);
        const allowed = await scene!.agent('client').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLUSTER }, { count: 10, requests: 1, concurrency: 5 });
        await assertAllAnswered(scene!.node, allowed, 'client pod -> NodePort under the policy');
      } finally {
        await deletePolicyAndWait(scene!.node, ['--namespace', NS, '--name', 'backend-from-client']);
      }
    });

    describe('masquerade in BPF', () => {
      test(title('a pod reaching servers outside the cluster is seen as the node; replies come back (TCP, UDP)'), {}, async () => {
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

      test(title('ICMP echo from a pod to a server outside: masqueraded (a NAT mapping keyed by the echo identifier), replies come back'), {}, async () => {
        const r = await pool.exec(scene!.pod('client').netns, ['ping', '-n', '-c', '3', '-i', '0.2', '-W', '1', REMOTE_HOST_IP]);
        assert.equal(r.code, 0, `ping ${REMOTE_HOST_IP} from the pod: ${r.stdout}${r.stderr}`);
        const icmp = (await snatEntries(scene!.node)).map((e) => decodeNatKey(e.key)).filter((k) => k.proto === (v === 6 ? 58 : 1) && (k.saddr === ip('client') || k.daddr === REMOTE_NODE_IP));
        assert.ok(icmp.some((k) => k.saddr === ip('client') && k.daddr === REMOTE_HOST_IP), `an EGRESS mapping for the echo: ${JSON.stringify(icmp)}`);
        assert.ok(icmp.some((k) => k.saddr === REMOTE_HOST_IP && k.daddr === REMOTE_NODE_IP), `an INGRESS mapping on the node address: ${JSON.stringify(icmp)}`);
      });

      test(title('an ICMP error for a masqueraded flow reaches the pod: UDP to a closed port outside gets ECONNREFUSED'), {}, async () => {
        const shots = await scene!.agent('client').udpShots({ dst: REMOTE_HOST_IP, port: 5999 }, { count: 2, concurrency: 1, timeoutMs: 1500 });
        assert.deepEqual(shots.map((x) => x.outcome), ['refused', 'refused'], `the remote's port unreachable, addressed to the node, must be translated back to the pod: ${failures(shots)}`);
      });

      test(title('a pod port reused between a masqueraded flow and a service flow to the same remote backend'), {}, async () => {
        // pod:port -> remote:8080 directly, then pod:port -> NodePort 30082 (whose backend is remote:8080): one translated tuple, two meanings.
        await upsertService(scene!.node, id(13), { type: 'NodePort', frontend: { ip: ANY, port: NODE_PORT_REMOTE }, backends: [{ ip: REMOTE_HOST_IP, port: TCP_PORT }], trafficPolicy: 'Cluster' });
        const c = scene!.agent('client');
        const run = async (srcPort: number, dst: string, port: number) => failures(await c.tcpSessions({ dst, port, srcPort }, { count: 1, requests: 2, concurrency: 1, timeoutMs: 1500 }));
        const seen = {
          directFirst: await run(22_001, REMOTE_HOST_IP, TCP_PORT),
          serviceSecond: await run(22_001, OUTSIDE_NODE_IP, NODE_PORT_REMOTE),
          serviceFirst: await run(22_003, OUTSIDE_NODE_IP, NODE_PORT_REMOTE),
          directSecond: await run(22_003, REMOTE_HOST_IP, TCP_PORT),
        };
        assert.deepEqual(seen, { directFirst: 'none', serviceSecond: 'none', serviceFirst: 'none', directSecond: 'none' });
      });

      test(title('inside the masquerade CIDRs no SNAT: a pod reaching another pod is seen as itself'), async () => {
        const s = await scene!.agent('client').tcpOnce({ dst: ip('be-a'), port: TCP_PORT });
        assert.equal(s.outcome, 'open', await ctOfFailed(scene!.node, [s]));
        assert.equal(s.answers[0]!.peer, ip('client'));
      });

      test(title('the NAT entries of a finished flow are garbage-collected'), {}, async (t) => {
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

    test(title('the agent killed and started again: NodePort and masqueraded connections held open carry on, new ones work'), {}, async () => {
      const node = scene!.node;
      const [outside, client] = [scene!.agent('outside'), scene!.agent('client')];
      const viaNodePort = await outside.tcpOpen({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLUSTER });
      const viaRemoteNodePort = await outside.tcpOpen({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_REMOTE });
      const masqueraded = await client.tcpOpen({ dst: REMOTE_HOST_IP, port: TCP_PORT });
      const held = { viaNodePort, viaRemoteNodePort, masqueraded };
      for (const [k, h] of Object.entries(held)) assert.equal(h.session.outcome, 'open', `${k} before the restart: ${h.session.detail ?? ''}`);
      await node.agent.kill();
      await node.agent.start();
      const after: Record<string, string> = {};
      for (const [k, h] of Object.entries(held)) {
        const agent = k === 'masqueraded' ? client : outside;
        const s = await agent.tcpAsk(h.handle);
        after[k] = s.outcome === 'open' ? `open ${s.answers.at(-1)!.name}` : `${s.outcome} ${s.detail ?? ''}`;
        await agent.tcpClose(h.handle);
      }
      assert.deepEqual(after, {
        viaNodePort: `open ${viaNodePort.session.answers[0]!.name}`,
        viaRemoteNodePort: 'open remote',
        masqueraded: 'open remote',
      });
      const fresh = await outside.tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_CLUSTER }, { count: 10, requests: 2, concurrency: 5 });
      await assertAllAnswered(node, fresh, 'outside -> NodePort after the restart');
      assert.deepEqual([...new Set(fresh.flatMap((x) => x.answers.map((a) => a.peer)))], [OUTSIDE_CLIENT_IP]);
      const out = await client.tcpSessions({ dst: REMOTE_HOST_IP, port: TCP_PORT }, { count: 5, requests: 2, concurrency: 5 });
      await assertAllAnswered(node, out, 'client pod -> remote after the restart');
      assert.deepEqual([...new Set(out.flatMap((x) => x.answers.map((a) => a.peer)))], [REMOTE_NODE_IP], 'still masqueraded');
    });

    // Last: it leaves every NAT port toward the remote's UDP port taken for a minute.
    test(title('masquerade port exhaustion: more flows to one remote ip:port than NAT ports, the rest dropped and counted'), {}, async (t) => {
      const before = dropCounts(await bpfMetrics(scene!.node));
      const shots = await scene!.agent('client').udpShots({ dst: REMOTE_HOST_IP, port: UDP_PORT }, { count: 5200, concurrency: 100, timeoutMs: 1000 });
      const after = dropCounts(await bpfMetrics(scene!.node));
      const exhausted = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('NAT_PORT_EXHAUSTED')).reduce((s, [, v]) => s + v, 0);
      // A source port the pod's stack picks twice is one flow and one mapping: count ports, not datagrams.
      const answered = new Set(shots.filter((x) => x.outcome === 'open').map((x) => x.localPort)).size;
      const failed = shots.filter((x) => x.outcome !== 'open');
      t.diagnostic(`${answered} source ports masqueraded (${NAT_PORTS} NAT ports), ${failed.length} datagrams unanswered, NAT_PORT_EXHAUSTED drops ${exhausted(before)} -> ${exhausted(after)}`);
      assert.ok(answered <= NAT_PORTS, `no more flows than NAT ports got through: ${answered}`);
      assert.ok(answered >= NAT_PORTS * 0.9, `most of the port range was used before the allocator gave up: ${answered}`);
      assert.ok(failed.length > 0, 'some flows found no port');
      assert.ok(exhausted(after) - exhausted(before) >= failed.length, `each flow without a port is counted as NAT_PORT_EXHAUSTED: ${failures(failed)}; drops ${JSON.stringify(after)}`);
    });
  }
}
