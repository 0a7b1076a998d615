// Backends leaving a service under real traffic: the datapath notices that a
// connection's backend is no longer one of the service's members (the agent
// walks no conntrack table: the old entries are still there), so a connected
// UDP client's next datagrams reach a live backend within a second while TCP
// to the others carries on; a
// terminating backend keeps its existing connections but gets no new ones.
// This node selects backends with Maglev (--lb-algorithm maglev), so the
// tables' rebuild on every change is exercised under traffic too; the
// ClusterIP tests run with the default (random). Last, agent restarts:
// services, backend IDs and pinned connections outlive the agent.
// One suite for every family (family.ts): the wrappers
// test/e2e/servicesBackends*.test.ts run it on IPv4, IPv6 and dual-stack
// pods; on dual-stack every row runs on both IP versions.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { LbBackendState } from '../../src/datapath/types.js';
import { bpfConntrack } from './datapathObserve.js';
import { type Family, type IpFamily, ipIn, versionsOf } from './family.js';
import { NetnsPool } from './netns.js';
import { requireRoot } from './root.js';
import { RtnetlinkWatch } from './rtnetlinkWatch.js';
import { assertAllAnswered, deleteService, getService, lbDiagnostics, upsertService } from './serviceApi.js';
import { shareByBackend, type StreamEvent } from './serviceProcess.js';
import { rowTitle, type ServiceScene, serviceId, startServiceScene } from './serviceScene.js';

const NS = 'tdl-svb';
/** IPv4 templates (family.ts mirrors them on IPv6). */
const POD_CIDR = '10.242.0.0/24';
const TCP_PORT = 8080;
const UDP_PORT = 5353;
const BACKENDS = ['be-a', 'be-b', 'be-c'];
const VIP_T = '10.96.1.10';
const VIP_OTHER_T = '10.96.1.11';
const STREAM_INTERVAL_MS = 50;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The backend-change suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function servicesBackendsSuite(family: Family, tag: string): void {
  requireRoot('the service backend-change tests');
  const pool = new NetnsPool(tag);
  let scene: ServiceScene | undefined;
  /** The restart row's rtnetlink watches: stopped there, or in `after` when it failed first. */
  const watches: RtnetlinkWatch[] = [];

  /** Both services of IP version `v` (TCP 80, UDP 53) with `backends` in the given states. */
  async function programFor(v: IpFamily, backends: ReadonlyArray<{ name: string; state?: LbBackendState }>): Promise<void> {
    const list = (port: number) => backends.map((b) => ({ ip: scene!.podIp(b.name, v), port, ...(b.state ? { state: b.state } : {}) }));
    const vip = ipIn(v, VIP_T);
    await Promise.all([
      upsertService(scene!.node, serviceId(v, 1), { frontend: { ip: vip, port: 80, protocol: 'TCP' }, backends: list(TCP_PORT) }),
      upsertService(scene!.node, serviceId(v, 2), { frontend: { ip: vip, port: 53, protocol: 'UDP' }, backends: list(UDP_PORT) }),
    ]);
  }

  before(async () => {
    scene = await startServiceScene(pool, {
      nodeName: `tdl-node-${tag}`,
      podCidr: POD_CIDR,
      family,
      namespace: NS,
      pods: [...BACKENDS.map((name) => ({ name, labels: { app: 'backend', pod: name } })), { name: 'client', labels: { app: 'client' } }],
      tcpPorts: [TCP_PORT],
      udpPorts: [UDP_PORT],
      extraAgentArgs: ['--lb-algorithm', 'maglev'],
    });
    for (const v of scene.versions) await programFor(v, BACKENDS.map((name) => ({ name })));
  });

  after(async () => {
    for (const w of watches) await w.stop();
    if (scene) await scene.cleanup();
    else await pool.cleanup();
  });

  for (const v of versionsOf(family)) rowsOn(v);

  /** Every row on IP version `v`. */
  function rowsOn(v: IpFamily): void {
    const ip = (pod: string) => scene!.podIp(pod, v);
    const id = (n: number) => serviceId(v, n);
    const title = (t: string) => rowTitle(family, v, t);
    const program = (backends: ReadonlyArray<{ name: string; state?: LbBackendState }>) => programFor(v, backends);
    const VIP = ipIn(v, VIP_T);
    const VIP_OTHER = ipIn(v, VIP_OTHER_T);

    /** Held connections: `count` of them, with the backend each reached. */
    async function holdConnections(count: number): Promise<Array<{ handle: number; backend: string }>> {
      const c = scene!.agent('client');
      const held: Array<{ handle: number; backend: string }> = [];
      for (let i = 0; i < count; i++) {
        const { handle, session } = await c.tcpOpen({ dst: VIP, port: 80 });
        assert.equal(session.outcome, 'open', `held connection ${i}: ${session.outcome} ${session.detail ?? ''}`);
        held.push({ handle, backend: session.answers[0]!.name });
      }
      return held;
    }

    const lastName = (events: readonly StreamEvent[]) => [...events].reverse().find((e) => e.name)?.name;

    /** The client's translated UDP conntrack entries to `backend` of service `revNat`: what a walk of the table would have deleted. */
    async function translatedEntriesTo(backend: string, revNat: number): Promise<number> {
      const rows = await bpfConntrack(scene!.node);
      return rows.filter((r) => r.proto === 17 && r.saddr === ip('client') && r.daddr === ip(backend) && r.dport === UDP_PORT && r.service?.revNatIndex === revNat && !r.service.serviceEntry).length;
    }

    test(title('Maglev: 300 new connections (TCP) and 300 datagrams (UDP) spread over the three backends'), async () => {
      const c = scene!.agent('client');
      const sessions = await c.tcpSessions({ dst: VIP, port: 80 }, { count: 300, requests: 4, concurrency: 20 });
      await assertAllAnswered(scene!.node, sessions, `client -> ${VIP}:80 (Maglev)`);
      const shots = await c.udpShots({ dst: VIP, port: 53 }, { count: 300, concurrency: 20 });
      await assertAllAnswered(scene!.node, shots, `client -> ${VIP}:53/udp (Maglev)`);
      for (const [what, share] of [
        ['TCP', shareByBackend(sessions)],
        ['UDP', shareByBackend(shots)],
      ] as const) {
        const text = JSON.stringify(Object.fromEntries(share));
        assert.deepEqual([...share.keys()].sort(), BACKENDS, `${what}: all three backends: ${text}`);
        for (const n of share.values()) assert.ok(n >= 60 && n <= 141, `${what}: each share within 20–47%: ${text}`);
      }
      assert.ok(sessions.every((x) => new Set(x.answers.map((a) => a.name)).size === 1), 'each connection stayed on its backend');
    });

    test(title('a backend deleted mid-traffic: TCP to the others unaffected, a connected UDP client moves within 1 s'), async (t) => {
      const c = scene!.agent('client');
      const held = await holdConnections(15);
      // Several connected UDP clients; the victim is the backend the first one is on.
      const streams = await Promise.all(Array.from({ length: 6 }, () => c.udpStream({ dst: VIP, port: 53 }, STREAM_INTERVAL_MS)));
      await sleep(500);
      const before = await Promise.all(streams.map((s) => c.udpStreamRead(s)));
      for (const [i, ev] of before.entries()) assert.ok(lastName(ev), `stream ${i} got answers before the delete: ${JSON.stringify(ev.slice(-3))}`);
      const victim = lastName(before[0]!)!;
      const onVictim = before.filter((ev) => lastName(ev) === victim).length;
      const pinnedBefore = await translatedEntriesTo(victim, id(2));
      assert.ok(pinnedBefore >= onVictim, `conntrack holds the ${onVictim} streams' entries to ${victim}: ${pinnedBefore}`);
      t.diagnostic(`victim ${victim}: ${onVictim} of 6 UDP streams, ${held.filter((h) => h.backend === victim).length} of 15 TCP connections`);

      const deletedAt = Date.now();
      await program(BACKENDS.filter((b) => b !== victim).map((name) => ({ name })));
      const realizedMs = Date.now() - deletedAt;
      await sleep(1500);
      const afterDelete = await Promise.all(streams.map((s) => c.udpStreamRead(s)));
      for (const s of streams) await c.udpStreamStop(s);

      // Every stream that was on the victim: its first answer from a live backend came within 1 s, and nothing from the victim after that.
      const report: string[] = [];
      for (const [i, ev] of afterDelete.entries()) {
        if (lastName(before[i]!) !== victim) continue;
        const later = ev.filter((e) => e.t > deletedAt);
        const firstLive = later.find((e) => e.name && e.name !== victim);
        const lastVictim = [...later].reverse().find((e) => e.name === victim);
        const errors = later.filter((e) => e.error).map((e) => e.error);
        report.push(`stream ${i}: first live answer +${firstLive ? firstLive.t - deletedAt : 'never'} ms (${firstLive?.name}), last victim answer +${lastVictim ? lastVictim.t - deletedAt : '-'} ms, errors ${JSON.stringify(errors.slice(0, 3))}`);
        assert.ok(firstLive && firstLive.t - deletedAt <= 1000, `stream ${i} reached a live backend within 1 s of the delete (PUT realized in ${realizedMs} ms): ${report.at(-1)}\n${await lbDiagnostics(scene!.node)}`);
        assert.ok(!lastVictim || lastVictim.t < firstLive.t, `stream ${i} never went back to the deleted backend: ${report.at(-1)}`);
      }
      for (const line of report) t.diagnostic(line);
      // The streams moved while their old entries are still in the table: nothing walked it (they expire by themselves).
      const leftBehind = await translatedEntriesTo(victim, id(2));
      t.diagnostic(`entries to ${victim} before the delete ${pinnedBefore}, after ${leftBehind}`);
      assert.ok(leftBehind >= onVictim, `the streams' entries to the deleted ${victim} are left to expire: ${leftBehind} of ${pinnedBefore}`);
      // Streams on live backends stayed where they were.
      for (const [i, ev] of afterDelete.entries()) {
        if (lastName(before[i]!) === victim) continue;
        const names = new Set(ev.filter((e) => e.t > deletedAt && e.name).map((e) => e.name));
        assert.deepEqual([...names], [lastName(before[i]!)], `stream ${i} on a live backend stayed on it`);
      }

      // TCP: every held connection to a live backend answers from the same backend.
      for (const h of held.filter((x) => x.backend !== victim)) {
        const s = await c.tcpAsk(h.handle);
        assert.equal(s.outcome, 'open', `held connection to ${h.backend}: ${s.outcome} ${s.detail ?? ''}`);
        assert.equal(s.answers.at(-1)!.name, h.backend, 'still on its backend');
      }
      // New connections never go to the deleted backend.
      const fresh = await c.tcpSessions({ dst: VIP, port: 80 }, { count: 60, requests: 2, concurrency: 10 });
      await assertAllAnswered(scene!.node, fresh, `new connections after ${victim} was deleted`);
      const share = shareByBackend(fresh);
      assert.ok(!share.has(victim), `no new connection to the deleted ${victim}: ${JSON.stringify(Object.fromEntries(share))}`);
      assert.equal(share.size, 2, `new connections spread over the two left: ${JSON.stringify(Object.fromEntries(share))}`);
      // What became of the connections to the deleted backend (not part of the contract: its conntrack entries are gone).
      const orphaned = await Promise.all(held.filter((h) => h.backend === victim).map((h) => c.tcpAsk(h.handle, 1000)));
      t.diagnostic(`connections held to the deleted ${victim}: ${JSON.stringify(orphaned.map((o) => `${o.outcome}${o.outcome === 'open' ? ` (${o.answers.at(-1)!.name})` : ''}`))}`);
      for (const h of held) await c.tcpClose(h.handle);
      await program(BACKENDS.map((name) => ({ name })));
    });

    test(title('a backend removed from one service but still backing another: that service\'s connected UDP client moves within 1 s'), async (t) => {
      const c = scene!.agent('client');
      // Service 3 shares every UDP backend with service 2 (same address, port, protocol: the same datapath backend).
      const other = { frontend: { ip: VIP_OTHER, port: 53, protocol: 'UDP' as const }, backends: BACKENDS.map((b) => ({ ip: ip(b), port: UDP_PORT })) };
      await upsertService(scene!.node, id(3), other);
      try {
        const stream = await c.udpStream({ dst: VIP, port: 53 }, STREAM_INTERVAL_MS);
        const otherStream = await c.udpStream({ dst: VIP_OTHER, port: 53 }, STREAM_INTERVAL_MS);
        await sleep(400);
        const victim = lastName(await c.udpStreamRead(stream))!;
        assert.ok(victim, 'the stream got answers');
        const pinnedBefore = await translatedEntriesTo(victim, id(2));
        assert.ok(pinnedBefore >= 1, `conntrack holds the stream's entry to ${victim}`);
        const removedAt = Date.now();
        await program(BACKENDS.filter((b) => b !== victim).map((name) => ({ name })));
        await sleep(1500);
        const events = (await c.udpStreamRead(stream)).filter((e) => e.t > removedAt);
        const otherEvents = (await c.udpStreamRead(otherStream)).filter((e) => e.t > removedAt);
        await c.udpStreamStop(stream);
        await c.udpStreamStop(otherStream);
        const firstLive = events.find((e) => e.name && e.name !== victim);
        const lastVictim = [...events].reverse().find((e) => e.name === victim);
        t.diagnostic(`${victim} removed from service 2: first live answer +${firstLive ? firstLive.t - removedAt : 'never'} ms, last answer from ${victim} +${lastVictim ? lastVictim.t - removedAt : '-'} ms`);
        assert.ok(firstLive && firstLive.t - removedAt <= 1000, `service 2's stream left ${victim} within 1 s (${victim} still backs service 3, so its backend entry stays): ${JSON.stringify(events.slice(-3))}\n${await lbDiagnostics(scene!.node)}`);
        assert.ok(!lastVictim || lastVictim.t < firstLive.t, 'and never went back');
        assert.ok((await translatedEntriesTo(victim, id(2))) >= 1, 'the stream moved with its old entry still in the table: conntrack was not walked');
        // Service 3 still has it: its own stream was not disturbed.
        assert.equal(new Set(otherEvents.map((e) => e.name ?? e.error)).size, 1, `service 3's stream stayed put: ${JSON.stringify([...new Set(otherEvents.map((e) => e.name ?? e.error))])}`);
      } finally {
        await deleteService(scene!.node, id(3));
        await program(BACKENDS.map((name) => ({ name })));
      }
    });

    test(title('a terminating backend keeps its existing TCP connections but gets no new ones'), async () => {
      const c = scene!.agent('client');
      const held = await holdConnections(12);
      const draining = held[0]!.backend;
      await program(BACKENDS.map((name) => ({ name, state: name === draining ? ('terminating' as const) : ('active' as const) })));
      for (const h of held) {
        const s = await c.tcpAsk(h.handle);
        assert.equal(s.outcome, 'open', `held connection to ${h.backend} (${draining} draining): ${s.outcome} ${s.detail ?? ''}\n${await lbDiagnostics(scene!.node)}`);
        assert.equal(s.answers.at(-1)!.name, h.backend, 'still on its backend');
      }
      const fresh = await c.tcpSessions({ dst: VIP, port: 80 }, { count: 90, requests: 2, concurrency: 10 });
      await assertAllAnswered(scene!.node, fresh, `new connections while ${draining} drains`);
      const share = shareByBackend(fresh);
      assert.ok(!share.has(draining), `no new connection to the terminating ${draining}: ${JSON.stringify(Object.fromEntries(share))}`);
      assert.equal(share.size, 2, 'new connections spread over the two active backends');
      // The drained connections still work at the end.
      for (const h of held.filter((x) => x.backend === draining)) assert.equal((await c.tcpAsk(h.handle)).answers.at(-1)!.name, draining);
      for (const h of held) await c.tcpClose(h.handle);
      await program(BACKENDS.map((name) => ({ name })));
    });

    test(title('maintenance and quarantined backends get no new connections; Maglev follows the weights'), async () => {
      const c = scene!.agent('client');
      await program([{ name: 'be-a', state: 'maintenance' }, { name: 'be-b', state: 'quarantined' }, { name: 'be-c' }]);
      const onlyC = await c.tcpSessions({ dst: VIP, port: 80 }, { count: 40, requests: 1, concurrency: 10 });
      await assertAllAnswered(scene!.node, onlyC, 'new connections with be-a in maintenance, be-b quarantined');
      assert.deepEqual(Object.fromEntries(shareByBackend(onlyC)), { 'be-c': 40 });
      // Weights: 3 : 1 : 0.
      const weighted = (port: number) => [
        { ip: ip('be-a'), port, weight: 3 },
        { ip: ip('be-b'), port, weight: 1 },
        { ip: ip('be-c'), port, weight: 0 },
      ];
      await upsertService(scene!.node, id(1), { frontend: { ip: VIP, port: 80, protocol: 'TCP' }, backends: weighted(TCP_PORT) });
      const sessions = await c.tcpSessions({ dst: VIP, port: 80 }, { count: 300, requests: 1, concurrency: 20 });
      await assertAllAnswered(scene!.node, sessions, 'new connections over weights 3:1:0');
      const share = shareByBackend(sessions);
      const text = JSON.stringify(Object.fromEntries(share));
      assert.ok(!share.has('be-c'), `weight 0 takes no new connection: ${text}`);
      const a = (share.get('be-a') ?? 0) / 300;
      assert.ok(a >= 0.65 && a <= 0.85, `be-a (weight 3 of 4) took ${(a * 100).toFixed(1)}%: ${text}`);
      await program(BACKENDS.map((name) => ({ name })));
    });

    test(title('the agent restarted (SIGTERM, then SIGKILL): services and their connections live on'), async (t) => {
      const c = scene!.agent('client');
      const node = scene!.node;
      const held = await holdConnections(6);
      const stream = await c.udpStream({ dst: VIP, port: 53 }, STREAM_INTERVAL_MS);
      await sleep(300);
      const streamBackend = lastName(await c.udpStreamRead(stream));
      assert.ok(streamBackend, 'the UDP stream got answers');
      const before = await getService(node, id(1));
      for (const how of ['stop', 'kill'] as const) {
        const downAt = Date.now();
        // A restart writes nothing already in force: an IPv6 ClusterIP's route "replaced" by an equal one is swapped and announced.
        const watch = await RtnetlinkWatch.start(node.nodePath);
        watches.push(watch);
        await node.agent[how]();
        // With the agent down the pinned maps and programs keep serving.
        const whileDown = await c.tcpSessions({ dst: VIP, port: 80 }, { count: 10, requests: 2, concurrency: 5 });
        await assertAllAnswered(scene!.node, whileDown, `new connections while the agent is down (${how})`);
        await node.agent.start();
        t.diagnostic(`agent ${how} + start: ${Date.now() - downAt} ms`);
        await sleep(200);
        await watch.stop();
        assert.deepEqual(watch.changes(), [], `the ${how} + start wrote no route or address and flushed no neighbour in the node`);
        const after = await getService(node, id(1));
        assert.equal(after.realized, true, `service 1 realized after the restart: ${JSON.stringify(after)}`);
        assert.deepEqual(after['backend-addresses'].map((b) => [b.ip, b.id]), before['backend-addresses'].map((b) => [b.ip, b.id]), 'backend IDs are stable');
        for (const h of held) {
          const s = await c.tcpAsk(h.handle);
          assert.equal(s.outcome, 'open', `held connection to ${h.backend} after ${how}: ${s.outcome} ${s.detail ?? ''}\n${await lbDiagnostics(node)}`);
          assert.equal(s.answers.at(-1)!.name, h.backend);
        }
        const fresh = await c.tcpSessions({ dst: VIP, port: 80 }, { count: 60, requests: 2, concurrency: 10 });
        await assertAllAnswered(scene!.node, fresh, `new connections after ${how} + start`);
        assert.equal(shareByBackend(fresh).size, 3, `new connections spread after ${how}: ${JSON.stringify(Object.fromEntries(shareByBackend(fresh)))}`);
      }
      const events = await c.udpStreamRead(stream);
      await c.udpStreamStop(stream);
      const names = new Set(events.filter((e) => e.name).map((e) => e.name));
      assert.deepEqual([...names], [streamBackend], `the connected UDP client stayed on ${streamBackend} through both restarts`);
      const errors = events.filter((e) => e.error);
      assert.equal(errors.length, 0, JSON.stringify(errors.slice(0, 3)));
      for (const h of held) await c.tcpClose(h.handle);
    });
  }
}
