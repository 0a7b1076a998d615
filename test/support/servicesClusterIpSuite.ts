// ClusterIP services on the eBPF datapath with real traffic: new connections
// spread over three backend pods and each stays on its backend for its life;
// session affinity pins a client, expires, and never outlives the backend's
// membership; the same over UDP; a client port reused toward another
// frontend; a pod reaching its own service (hairpin); a service without
// backends; the node reaching a ClusterIP; an ICMP error for a service flow
// translated back (ECONNREFUSED on a connected UDP socket); policy still
// enforced through the service; the CLI's service commands and `bpf lb
// list`; a frontend moved by an upsert; TCP and UDP on one address and port;
// no nftables table any more. One suite for every family (family.ts): the
// wrappers test/e2e/servicesClusterIp*.test.ts run it on IPv4, IPv6 and
// dual-stack pods; on dual-stack every row runs on both IP versions, with
// an IPv4 and an IPv6 service side by side.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { LB_HAIRPIN_IP4, LB_HAIRPIN_IP6 } from '../../src/datapath/bpf/constants.js';
import { cliJson, deletePolicyAndWait, importPolicyAndWait } from './datapathNode.js';
import { bpfMetrics, dropCounts, eventually } from './datapathObserve.js';
import { type Family, hostPort, type IpFamily, ipIn, versionsOf } from './family.js';
import { NetnsPool } from './netns.js';
import { networkPolicy } from './policyDocuments.js';
import { requireRoot } from './root.js';
import { run } from './run.js';
import { assertAllAnswered, bpfLbList, deleteService, getService, upsertService } from './serviceApi.js';
import { failures, movedSessions, type SessionResult, shareByBackend, type ShotResult } from './serviceProcess.js';
import { rowTitle, type ServiceScene, serviceId, startServiceScene } from './serviceScene.js';

const NS = 'tdl-svc';
/** IPv4 templates (family.ts mirrors them on IPv6). */
const POD_CIDR = '10.241.0.0/24';
const TCP_PORT = 8080;
const UDP_PORT = 5353;
/** No pod listens here: a datagram to it gets an ICMP port unreachable. */
const CLOSED_UDP_PORT = 5999;
const BACKENDS = ['be-a', 'be-b', 'be-c'];

const VIP_T = '10.96.0.10';
const VIP_AFFINITY_T = '10.96.0.11';
const VIP_AFFINITY_SHORT_T = '10.96.0.17';
const VIP_HAIRPIN_T = '10.96.0.12';
const VIP_CLOSED_T = '10.96.0.13';
/** A service without backends. */
const VIP_EMPTY_T = '10.96.0.16';
/** Two services whose only backend is be-a. */
const VIP_ONE_A_T = '10.96.0.14';
const VIP_ONE_B_T = '10.96.0.15';

/** The source a pod sees when it reached itself through its service: LB_HAIRPIN_IP4 or LB_HAIRPIN_IP6. */
const hairpinIp = (v: IpFamily) => (v === 4 ? LB_HAIRPIN_IP4 : LB_HAIRPIN_IP6);

/** The ClusterIP suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function servicesClusterIpSuite(family: Family, tag: string): void {
  requireRoot('the ClusterIP service tests');
  const pool = new NetnsPool(tag);
  let scene: ServiceScene | undefined;

  before(async () => {
    scene = await startServiceScene(pool, {
      nodeName: `tdl-node-${tag}`,
      podCidr: POD_CIDR,
      family,
      namespace: NS,
      pods: [...BACKENDS.map((name) => ({ name, labels: { app: 'backend', pod: name } })), { name: 'client', labels: { app: 'client' } }, { name: 'intruder', labels: { app: 'intruder' } }],
      tcpPorts: [TCP_PORT],
      udpPorts: [UDP_PORT],
    });
    for (const v of scene.versions) {
      const node = scene.node;
      const ip = (pod: string) => scene!.podIp(pod, v);
      const id = (n: number) => serviceId(v, n);
      const at = (a: string) => ipIn(v, a);
      const all = (port: number) => BACKENDS.map((b) => ({ ip: ip(b), port }));
      await upsertService(node, id(1), { frontend: { ip: at(VIP_T), port: 80, protocol: 'TCP' }, backends: all(TCP_PORT) });
      await upsertService(node, id(2), { frontend: { ip: at(VIP_T), port: 53, protocol: 'UDP' }, backends: all(UDP_PORT) });
      await upsertService(node, id(3), { frontend: { ip: at(VIP_AFFINITY_T), port: 80, protocol: 'TCP' }, backends: all(TCP_PORT), sessionAffinity: true, sessionAffinityTimeout: 600 });
      await upsertService(node, id(4), { frontend: { ip: at(VIP_AFFINITY_T), port: 53, protocol: 'UDP' }, backends: all(UDP_PORT), sessionAffinity: true, sessionAffinityTimeout: 600 });
      await upsertService(node, id(5), { frontend: { ip: at(VIP_HAIRPIN_T), port: 80, protocol: 'TCP' }, backends: [{ ip: ip('client'), port: TCP_PORT }] });
      await upsertService(node, id(11), { frontend: { ip: at(VIP_HAIRPIN_T), port: 53, protocol: 'UDP' }, backends: [{ ip: ip('client'), port: UDP_PORT }] });
      await upsertService(node, id(12), { frontend: { ip: at(VIP_EMPTY_T), port: 80, protocol: 'TCP' }, backends: [] });
      await upsertService(node, id(6), { frontend: { ip: at(VIP_CLOSED_T), port: 53, protocol: 'UDP' }, backends: [{ ip: ip('be-a'), port: CLOSED_UDP_PORT }] });
      for (const [n, vip] of [
        [7, VIP_ONE_A_T],
        [8, VIP_ONE_B_T],
      ] as const) {
        await upsertService(node, id(n), { frontend: { ip: at(vip), port: 80, protocol: 'TCP' }, backends: [{ ip: ip('be-a'), port: TCP_PORT }] });
        await upsertService(node, id(n + 2), { frontend: { ip: at(vip), port: 53, protocol: 'UDP' }, backends: [{ ip: ip('be-a'), port: UDP_PORT }] });
      }
    }
  });

  after(async () => {
    if (scene) await scene.cleanup();
    else await pool.cleanup();
  });

  /** Each backend's share of `total` lies in [min, max] (fractions), every backend got some. */
  function assertSpread(results: ReadonlyArray<SessionResult | ShotResult>, min: number, max: number, what: string): Map<string, number> {
    const share = shareByBackend(results);
    const text = JSON.stringify(Object.fromEntries(share));
    assert.deepEqual([...share.keys()].sort(), [...BACKENDS].sort(), `${what}: answers from exactly the three backends: ${text}`);
    for (const b of BACKENDS) {
      const f = share.get(b)! / results.length;
      assert.ok(f >= min && f <= max, `${what}: ${b} got ${(f * 100).toFixed(1)}% (bounds ${min * 100}–${max * 100}%): ${text}`);
    }
    return share;
  }

  for (const v of versionsOf(family)) rowsOn(v);

  /** Every row on IP version `v`: its services, its addresses. */
  function rowsOn(v: IpFamily): void {
    const ip = (pod: string) => scene!.podIp(pod, v);
    const id = (n: number) => serviceId(v, n);
    const title = (t: string) => rowTitle(family, v, t);
    const VIP = ipIn(v, VIP_T);
    const VIP_AFFINITY = ipIn(v, VIP_AFFINITY_T);
    const VIP_AFFINITY_SHORT = ipIn(v, VIP_AFFINITY_SHORT_T);
    const VIP_HAIRPIN = ipIn(v, VIP_HAIRPIN_T);
    const VIP_CLOSED = ipIn(v, VIP_CLOSED_T);
    const VIP_EMPTY = ipIn(v, VIP_EMPTY_T);
    const VIP_ONE_A = ipIn(v, VIP_ONE_A_T);
    const VIP_ONE_B = ipIn(v, VIP_ONE_B_T);
    const HAIRPIN_IP = hairpinIp(v);

    describe(title('ClusterIP, three backends'), () => {
      test(title('TCP: 300 new connections spread over all three; each stays on its backend for its life'), async (t) => {
        const started = Date.now();
        const sessions = await scene!.agent('client').tcpSessions({ dst: VIP, port: 80 }, { count: 300, requests: 8, concurrency: 20 });
        await assertAllAnswered(scene!.node, sessions, `client -> ${VIP}:80, every connection answers all rounds`);
        const share = assertSpread(sessions, 0.2, 0.47, 'TCP');
        t.diagnostic(`300 connections × 8 rounds in ${Date.now() - started} ms: ${JSON.stringify(Object.fromEntries(share))}`);
        const moved = movedSessions(sessions);
        assert.equal(moved.length, 0, `connections that changed backend: ${JSON.stringify(moved.slice(0, 3))}`);
        // The backend sees the client pod itself: no SNAT inside the cluster.
        const peers = new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)));
        assert.deepEqual([...peers], [ip('client')], 'the backends saw the client pod\'s address');
      });

      test(title('TCP: session affinity pins a client to one backend'), async () => {
        // One connection first: concurrent first connections of a client may each draw a backend before the
        // affinity entry exists (as in Cilium; the k8s services suite does the same); a full run saw it once on IPv6.
        const first = await scene!.agent('client').tcpOnce({ dst: VIP_AFFINITY, port: 80 });
        assert.equal(first.outcome, 'open', JSON.stringify(first));
        const sessions = await scene!.agent('client').tcpSessions({ dst: VIP_AFFINITY, port: 80 }, { count: 40, requests: 2, concurrency: 8 });
        await assertAllAnswered(scene!.node, sessions, `client -> ${VIP_AFFINITY}:80 (affinity)`);
        const share = shareByBackend(sessions);
        assert.equal(share.size, 1, `every connection of the client reached one backend: ${JSON.stringify(Object.fromEntries(share))}`);
        // Another client is pinned too (to whichever backend it drew).
        assert.equal((await scene!.agent('intruder').tcpOnce({ dst: VIP_AFFINITY, port: 80 })).outcome, 'open');
        const other = shareByBackend(await scene!.agent('intruder').tcpSessions({ dst: VIP_AFFINITY, port: 80 }, { count: 20, requests: 1, concurrency: 5 }));
        assert.equal(other.size, 1, `a second client is pinned as well: ${JSON.stringify(Object.fromEntries(other))}`);
      });

      test(title('TCP: session affinity never leads to a backend removed from the service (while other services keep it)'), async () => {
        const c = scene!.agent('client');
        const pinned = [...shareByBackend(await c.tcpSessions({ dst: VIP_AFFINITY, port: 80 }, { count: 3, requests: 1, concurrency: 1 })).keys()];
        assert.equal(pinned.length, 1, JSON.stringify(pinned));
        const removed = pinned[0]!;
        const rest = BACKENDS.filter((b) => b !== removed);
        const affinity = { frontend: { ip: VIP_AFFINITY, port: 80, protocol: 'TCP' as const }, sessionAffinity: true, sessionAffinityTimeout: 600 };
        await upsertService(scene!.node, id(3), { ...affinity, backends: rest.map((b) => ({ ip: ip(b), port: TCP_PORT })) });
        try {
          // One connection first: it finds the stale pin and pins the client anew. Concurrent first
          // connections could each draw a backend before any of them writes the pin (as in Cilium).
          const first = await c.tcpSessions({ dst: VIP_AFFINITY, port: 80 }, { count: 1, requests: 1, concurrency: 1 });
          const after = [...first, ...(await c.tcpSessions({ dst: VIP_AFFINITY, port: 80 }, { count: 20, requests: 1, concurrency: 4 }))];
          await assertAllAnswered(scene!.node, after, `client -> ${VIP_AFFINITY}:80 after ${removed} left the service`);
          const share = shareByBackend(after);
          assert.ok(!share.has(removed), `the client was pinned to ${removed}, which left service 3 (it still backs service 1): ${JSON.stringify(Object.fromEntries(share))}`);
          assert.equal(share.size, 1, `pinned anew to one backend: ${JSON.stringify(Object.fromEntries(share))}`);
        } finally {
          await upsertService(scene!.node, id(3), { ...affinity, backends: BACKENDS.map((b) => ({ ip: ip(b), port: TCP_PORT })) });
        }
      });

      test(title('TCP: session affinity expires after its timeout (1 s here)'), async () => {
        // Each round's first connection pins the client again, to a backend drawn anew: within 8 rounds, more than one
        // (all 8 on one of three backends: 1 in 2,187). Done once a second backend is seen.
        await upsertService(scene!.node, id(13), { frontend: { ip: VIP_AFFINITY_SHORT, port: 80, protocol: 'TCP' }, backends: BACKENDS.map((b) => ({ ip: ip(b), port: TCP_PORT })), sessionAffinity: true, sessionAffinityTimeout: 1 });
        const rounds: string[] = [];
        for (let i = 0; i < 8 && new Set(rounds).size < 2; i++) {
          const sessions = await scene!.agent('client').tcpSessions({ dst: VIP_AFFINITY_SHORT, port: 80 }, { count: 5, requests: 1, concurrency: 1 });
          await assertAllAnswered(scene!.node, sessions, `client -> ${VIP_AFFINITY_SHORT}:80 round ${i}`);
          const names = [...shareByBackend(sessions).keys()];
          assert.equal(names.length, 1, `within the timeout one backend: ${JSON.stringify(names)}`);
          rounds.push(names[0]!);
          await new Promise((r) => setTimeout(r, 1600));
        }
        assert.ok(new Set(rounds).size > 1, `after each expiry the client was pinned anew: ${JSON.stringify(rounds)}`);
      });

      test(title('UDP: 300 datagrams from distinct source ports spread over all three'), async () => {
        const shots = await scene!.agent('client').udpShots({ dst: VIP, port: 53 }, { count: 300, concurrency: 20 });
        await assertAllAnswered(scene!.node, shots, `client -> ${VIP}:53/udp`);
        assertSpread(shots, 0.2, 0.47, 'UDP');
        const peers = new Set(shots.map((s) => s.answer!.peer));
        assert.deepEqual([...peers], [ip('client')], 'the backends saw the client pod\'s address');
      });

      test(title('UDP: a connected socket stays on its backend; session affinity pins a client'), async () => {
        const c = scene!.agent('client');
        const stream = await c.udpStream({ dst: VIP, port: 53 }, 20);
        await new Promise((r) => setTimeout(r, 600));
        const events = await c.udpStreamRead(stream);
        await c.udpStreamStop(stream);
        const names = new Set(events.map((e) => e.name ?? `error ${e.error}`));
        assert.ok(events.length >= 10, `the stream got answers: ${events.length}`);
        assert.equal(names.size, 1, `one flow, one backend: ${JSON.stringify([...names])}`);

        const shots = await c.udpShots({ dst: VIP_AFFINITY, port: 53 }, { count: 40, concurrency: 8 });
        await assertAllAnswered(scene!.node, shots, `client -> ${VIP_AFFINITY}:53/udp (affinity)`);
        const share = shareByBackend(shots);
        assert.equal(share.size, 1, `40 source ports, one backend under affinity: ${JSON.stringify(Object.fromEntries(share))}`);
      });
    });

    test(title('a client port reused toward another service with the same backend: replies come from the frontend it addressed'), async () => {
      // Both flows translate to the same tuple (client:port -> be-a): the second must not ride the first's conntrack entry and its frontend.
      const c = scene!.agent('client');
      const udpPort = 20_001;
      const first = await c.udpShots({ dst: VIP_ONE_A, port: 53, srcPort: udpPort }, { count: 1, concurrency: 1 });
      await assertAllAnswered(scene!.node, first, `client:${udpPort} -> ${VIP_ONE_A}:53`);
      const second = await c.udpShots({ dst: VIP_ONE_B, port: 53, srcPort: udpPort }, { count: 1, concurrency: 1, timeoutMs: 1500 });
      const tcpPort = 20_002;
      const firstTcp = await c.tcpSessions({ dst: VIP_ONE_A, port: 80, srcPort: tcpPort }, { count: 1, requests: 2, concurrency: 1 });
      await assertAllAnswered(scene!.node, firstTcp, `client:${tcpPort} -> ${VIP_ONE_A}:80`);
      const secondTcp = await c.tcpSessions({ dst: VIP_ONE_B, port: 80, srcPort: tcpPort }, { count: 1, requests: 2, concurrency: 1, timeoutMs: 1500 });
      // And a direct flow (no service) on the tuple a service flow translated to.
      const directPort = 20_003;
      await assertAllAnswered(scene!.node, await c.udpShots({ dst: VIP_ONE_A, port: 53, srcPort: directPort }, { count: 1, concurrency: 1 }), `client:${directPort} -> ${VIP_ONE_A}:53`);
      const direct = await c.udpShots({ dst: ip('be-a'), port: UDP_PORT, srcPort: directPort }, { count: 1, concurrency: 1, timeoutMs: 1500 });
      assert.deepEqual(
        { udp: failures(second), tcp: failures(secondTcp), direct: failures(direct) },
        { udp: 'none', tcp: 'none', direct: 'none' },
        `client:${udpPort} -> ${VIP_ONE_B}:53 after the same port went to ${VIP_ONE_A}:53; client:${tcpPort} -> ${VIP_ONE_B}:80 while the closed connection from that port to ${VIP_ONE_A}:80 is still in conntrack; client:${directPort} -> be-a:${UDP_PORT} straight after client:${directPort} -> ${VIP_ONE_A}:53 (each answer must come from the address the client sent to)`,
      );
    });

    test(title('hairpin: a pod reaches its own service and gets its own connection back'), async () => {
      const sessions = await scene!.agent('client').tcpSessions({ dst: VIP_HAIRPIN, port: 80 }, { count: 5, requests: 4, concurrency: 5 });
      await assertAllAnswered(scene!.node, sessions, `client -> ${VIP_HAIRPIN}:80 (its own service)`);
      const answers = sessions.flatMap((s) => s.answers);
      assert.ok(answers.every((a) => a.name === 'client'), 'the pod itself answered');
      // Its own address as a source would be dropped by the pod's stack: the datapath puts the hairpin address there.
      assert.deepEqual([...new Set(answers.map((a) => a.peer))], [HAIRPIN_IP], `the pod saw its hairpin flow come from LB_HAIRPIN_IP${v}`);
      const shots = await scene!.agent('client').udpShots({ dst: VIP_HAIRPIN, port: 53 }, { count: 5, concurrency: 5 });
      await assertAllAnswered(scene!.node, shots, 'UDP hairpin');
      assert.deepEqual([...new Set(shots.map((x) => `${x.answer!.name} saw ${x.answer!.peer}`))], [`client saw ${HAIRPIN_IP}`]);
    });

    test(title('a service without backends: the connection is dropped and counted as NO_SERVICE'), async () => {
      const before = dropCounts(await bpfMetrics(scene!.node));
      const r = await scene!.agent('client').tcpOnce({ dst: VIP_EMPTY, port: 80 }, 700);
      assert.notEqual(r.outcome, 'open');
      const after = dropCounts(await bpfMetrics(scene!.node));
      const noService = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('NO_SERVICE')).reduce((sum, [, v]) => sum + v, 0);
      assert.ok(noService(after) > noService(before), `NO_SERVICE drops counted: ${JSON.stringify(before)} -> ${JSON.stringify(after)} (client saw ${r.outcome})`);
    });

    test(title('the node reaches a ClusterIP (TCP and UDP)'), {}, async () => {
      const node = scene!.agent('node');
      const sessions = await node.tcpSessions({ dst: VIP, port: 80 }, { count: 30, requests: 3, concurrency: 6 });
      await assertAllAnswered(scene!.node, sessions, `node -> ${VIP}:80`);
      assert.equal(movedSessions(sessions).length, 0);
      assert.ok(shareByBackend(sessions).size >= 2, `the node's connections spread too: ${JSON.stringify(Object.fromEntries(shareByBackend(sessions)))}`);
      const peers = [...new Set(sessions.flatMap((s) => s.answers.map((a) => a.peer)))];
      assert.deepEqual(peers, [scene!.node.routerIps[v]], 'the node reaches services from the router address (the route through tendril_host)');
      const shots = await node.udpShots({ dst: VIP, port: 53 }, { count: 30, concurrency: 6 });
      await assertAllAnswered(scene!.node, shots, `node -> ${VIP}:53/udp`);
    });

    test(title('UDP to a service whose backend port is closed: ECONNREFUSED (the ICMP error translated back)'), async () => {
      const fromPod = await scene!.agent('client').udpShots({ dst: VIP_CLOSED, port: 53 }, { count: 3, concurrency: 1, timeoutMs: 1500 });
      assert.deepEqual(fromPod.map((s) => s.outcome), ['refused', 'refused', 'refused'], `a connected socket to ${VIP_CLOSED}:53 only takes an ICMP error quoting ${VIP_CLOSED}:53`);
    });

    test(title('UDP from the node to a service whose backend port is closed: ECONNREFUSED'), {}, async () => {
      const fromNode = await scene!.agent('node').udpShots({ dst: VIP_CLOSED, port: 53 }, { count: 3, concurrency: 1, timeoutMs: 1500 });
      assert.deepEqual(fromNode.map((s) => s.outcome), ['refused', 'refused', 'refused'], `the node's connected socket to ${VIP_CLOSED}:53 only takes an ICMP error quoting ${VIP_CLOSED}:53`);
    });

    test(title('policy holds through a service: a NetworkPolicy denying the client at the backends blocks it via the ClusterIP'), async () => {
      const node = scene!.node;
      const policy = networkPolicy(NS, 'backend-from-client', 'podSelector: {matchLabels: {app: backend}}\npolicyTypes: [Ingress]\ningress:\n- from: [{podSelector: {matchLabels: {app: client}}}]');
      await importPolicyAndWait(node, policy);
      try {
        const [client, intruder] = [scene!.agent('client'), scene!.agent('intruder')];
        // The control: straight to a backend's address, denied.
        assert.equal((await intruder.tcpOnce({ dst: ip('be-a'), port: TCP_PORT }, 500)).outcome, 'timeout', 'intruder -> be-a direct is denied');
        const denied = await intruder.tcpSessions({ dst: VIP, port: 80 }, { count: 6, requests: 1, concurrency: 6, timeoutMs: 600 });
        assert.deepEqual(
          denied.map((s) => s.outcome),
          Array(6).fill('timeout'),
          `intruder -> ClusterIP: every connection dropped at the backend's ingress: ${failures(denied)} ${JSON.stringify(denied.flatMap((s) => s.answers))}`,
        );
        const deniedUdp = await intruder.udpShots({ dst: VIP, port: 53 }, { count: 6, concurrency: 6, timeoutMs: 600 });
        assert.deepEqual(deniedUdp.map((s) => s.outcome), Array(6).fill('timeout'), `intruder -> ClusterIP over UDP: ${failures(deniedUdp)}`);
        const allowed = await client.tcpSessions({ dst: VIP, port: 80 }, { count: 30, requests: 2, concurrency: 10 });
        await assertAllAnswered(scene!.node, allowed, 'client -> ClusterIP is allowed');
        assert.equal(shareByBackend(allowed).size, 3, 'the allowed client reaches every backend');
      } finally {
        await deletePolicyAndWait(node, ['--namespace', NS, '--name', 'backend-from-client']);
      }
    });

    test(title('`tendril service upsert|list|delete` and `tendril bpf lb list` on the CLI, traffic following each step'), async () => {
      const node = scene!.node;
      const vip = ipIn(v, '10.96.0.20');
      const up = await node.cli(['service', 'upsert', '--id', String(id(20)), '--frontend', hostPort(vip, 80), '--backends', hostPort(ip('be-b'), TCP_PORT), '-o', 'json']);
      assert.equal(up.code, 0, up.stderr + up.stdout);
      const listed = await cliJson<Array<{ id: number; 'frontend-address': { ip: string; port: number } }>>(node, ['service', 'list']);
      assert.ok(listed.some((x) => x.id === id(20) && x['frontend-address'].ip === vip), JSON.stringify(listed).slice(0, 500));
      // The CLI answers once the agent took the service; the maps may follow a moment later.
      await eventually(async () => (await getService(node, id(20))).realized, 5000, `service ${id(20)} realized`);
      const lb = await cliJson<{ services: Array<{ id: number; address: string; port: number; count: number; slots: Array<{ backend?: string }> }> }>(node, ['bpf', 'lb', 'list']);
      const entry = lb.services.find((x) => x.address === vip && x.port === 80);
      assert.ok(entry, `bpf lb list holds ${vip}:80: ${JSON.stringify(lb.services.map((x) => `${x.address}:${x.port}`))}`);
      assert.equal(entry.count, 1);
      assert.equal(entry.slots[0]?.backend, hostPort(ip('be-b'), TCP_PORT), JSON.stringify(entry));
      const before = await scene!.agent('client').tcpSessions({ dst: vip, port: 80 }, { count: 5, requests: 2, concurrency: 5 });
      await assertAllAnswered(scene!.node, before, `client -> ${vip}:80 (service from the CLI)`);
      assert.deepEqual(Object.fromEntries(shareByBackend(before)), { 'be-b': 5 });
      const del = await node.cli(['service', 'delete', String(id(20))]);
      assert.equal(del.code, 0, del.stderr + del.stdout);
      const lbAfter = await cliJson<{ services: Array<{ address: string; port: number }> }>(node, ['bpf', 'lb', 'list']);
      assert.ok(!lbAfter.services.some((x) => x.address === vip), 'the maps no longer hold the frontend');
      const gone = await scene!.agent('client').tcpOnce({ dst: vip, port: 80 }, 800);
      assert.notEqual(gone.outcome, 'open', `a deleted service answers no more: ${JSON.stringify(gone)}`);
    });

    test(title('a service upserted with a new frontend and backend port: the old frontend stops answering, the new one works'), async () => {
      const node = scene!.node;
      const [oldVip, newVip] = [ipIn(v, '10.96.0.30'), ipIn(v, '10.96.0.31')];
      // The node's own connections only where it has them (IPv4; on IPv6 the todo rows above stand for them).
      const fromNode = v === 4;
      await upsertService(node, id(30), { frontend: { ip: oldVip, port: 80 }, backends: [{ ip: ip('be-c'), port: TCP_PORT }] });
      await assertAllAnswered(node, await scene!.agent('client').tcpSessions({ dst: oldVip, port: 80 }, { count: 3, requests: 1 }), `client -> ${oldVip}:80`);
      if (fromNode) await assertAllAnswered(node, await scene!.agent('node').tcpSessions({ dst: oldVip, port: 80 }, { count: 3, requests: 1 }), `node -> ${oldVip}:80`);
      // Same ID, another frontend; the backend's port changes too (UDP_PORT has no TCP listener: refused proves the new port is used).
      await upsertService(node, id(30), { frontend: { ip: newVip, port: 81 }, backends: [{ ip: ip('be-c'), port: UDP_PORT }] });
      const seen = {
        oldFromPod: (await scene!.agent('client').tcpOnce({ dst: oldVip, port: 80 }, 700)).outcome,
        oldFromNode: fromNode ? (await scene!.agent('node').tcpOnce({ dst: oldVip, port: 80 }, 700)).outcome : 'timeout',
        newFromPod: (await scene!.agent('client').tcpOnce({ dst: newVip, port: 81 }, 1500)).outcome,
        newFromNode: fromNode ? (await scene!.agent('node').tcpOnce({ dst: newVip, port: 81 }, 1500)).outcome : 'refused',
      };
      const lb = JSON.stringify(await bpfLbList(node));
      await deleteService(node, id(30));
      assert.notEqual(seen.oldFromPod, 'open', 'the old frontend no longer reaches the backend from a pod');
      assert.notEqual(seen.oldFromNode, 'open', 'nor from the node');
      assert.deepEqual({ newFromPod: seen.newFromPod, newFromNode: seen.newFromNode }, { newFromPod: 'refused', newFromNode: 'refused' }, `the new frontend leads to be-c's new (closed) port: ${lb.slice(0, 1200)}`);
      assert.ok(!lb.includes(`"${oldVip}"`), `bpf lb list has no entry for the old frontend: ${lb.slice(0, 1200)}`);
    });

    test(title('one address and port, TCP and UDP as two services with different backends'), async () => {
      const node = scene!.node;
      const vip = ipIn(v, '10.96.0.40');
      await upsertService(node, id(40), { frontend: { ip: vip, port: 53, protocol: 'TCP' }, backends: [{ ip: ip('be-a'), port: TCP_PORT }] });
      await upsertService(node, id(41), { frontend: { ip: vip, port: 53, protocol: 'UDP' }, backends: [{ ip: ip('be-b'), port: UDP_PORT }] });
      try {
        const tcp = await scene!.agent('client').tcpSessions({ dst: vip, port: 53 }, { count: 5, requests: 1 });
        const udp = await scene!.agent('client').udpShots({ dst: vip, port: 53 }, { count: 5 });
        await assertAllAnswered(node, [...tcp, ...udp], `client -> ${vip}:53 over TCP and UDP`);
        assert.deepEqual({ tcp: Object.fromEntries(shareByBackend(tcp)), udp: Object.fromEntries(shareByBackend(udp)) }, { tcp: { 'be-a': 5 }, udp: { 'be-b': 5 } });
      } finally {
        await deleteService(node, id(40));
        await deleteService(node, id(41));
      }
    });

    // Once per suite: it is about the node, not a family.
    if (v === versionsOf(family)[0]) test('no nftables table `tendril` with the eBPF datapath', async () => {
      const r = await run(['nsenter', `--net=${scene!.node.nodePath}`, '--', 'nft', '-j', 'list', 'tables']);
      assert.equal(r.code, 0, r.stderr);
      const tables = (JSON.parse(r.stdout) as { nftables: Array<{ table?: { family: string; name: string } }> }).nftables.flatMap((x) => (x.table ? [`${x.table.family} ${x.table.name}`] : []));
      assert.ok(!tables.some((tb) => tb.endsWith(' tendril')), `the node's tables: ${JSON.stringify(tables)}`);
    });
  }
}
