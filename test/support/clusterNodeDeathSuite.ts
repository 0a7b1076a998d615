/**
 * A node killed with SIGKILL (no clean shutdown), in either routing mode
 * (one test file per mode): once its lease expires every other node forgets
 * it — its node record, its routes (rtm_protocol 212), its pods' ipcache
 * entries in the API and in the datapath's map, its tunnel endpoint — so its
 * pods are no longer reachable through stale state; started again on the
 * same node with the same state, it rejoins and connectivity returns.
 */
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { after, before, test } from 'node:test';
import { Backoff } from '../../src/async/backoff.js';
import { bpfIpcache } from './datapathObserve.js';
import { type ClusterIpam, type ClusterPod, ClusterScene, cidrHolds, POD_TCP_PORT, type RoutingMode } from './clusterScene.js';
import { requireRoot } from './root.js';

export function clusterNodeDeathSuite(opts: { tag: string; routingMode: RoutingMode; store?: 'etcd' | 'kubernetes'; ipam?: ClusterIpam }): void {
  requireRoot(`clusterNodeDeathSuite (${opts.routingMode})`);

  const T = { timeout: 90_000 };
  const B = 1;
  let scene: ClusterScene | undefined;
  const pods: ClusterPod[] = [];
  const s = () => scene!;
  let bCidrs: string[] = [];

  before(async () => {
    scene = await ClusterScene.create({ tag: opts.tag, routingMode: opts.routingMode, ipam: opts.ipam ?? 'block', leaseTtl: 3, ...(opts.store ? { store: opts.store } : {}) });
    for (const i of [0, 1, 2]) pods.push(await scene.addPod(i, { name: `p${i}`, labels: { app: `p${i}` } }));
    await scene.waitConverged(20_000);
  });

  after(async () => {
    await scene?.cleanup();
  });

  /** TCP and ICMP from one pod to another: 'ok' or what failed. */
  async function reach(from: ClusterPod, to: ClusterPod, timeoutMs = 700): Promise<string> {
    const tcp = await from.agent.tcpOnce({ dst: to.ip, port: POD_TCP_PORT }, timeoutMs);
    const icmp = await s().ping(from.netns, to.ip, { count: 1, waitSeconds: 1 });
    return tcp.outcome === 'open' && icmp.ok ? 'ok' : `tcp ${tcp.outcome}, icmp ${icmp.ok ? 'ok' : 'lost'}`;
  }

  test('before: every pod reaches the pod on node B', T, async () => {
    const b = s().node(B);
    bCidrs = (await s().nodeStatus(0)).find((n) => n.name === b.name)!.podCidrs;
    assert.ok(bCidrs.length > 0 && bCidrs.some((c) => cidrHolds(c, pods[B]!.ip)), `node B's pod CIDRs ${JSON.stringify(bCidrs)} hold its pod ${pods[B]!.ip}`);
    assert.deepEqual({ a: await reach(pods[0]!, pods[B]!), c: await reach(pods[2]!, pods[B]!) }, { a: 'ok', c: 'ok' });
  });

  test('node B\'s agent killed: after its lease expires the others drop its record, routes, ipcache entries and tunnel endpoint; its pods are unreachable', T, async (t) => {
    const b = s().node(B);
    const podB = pods[B]!;
    await s().killAgent(B);
    const t0 = performance.now();
    const others = [0, 2];
    const deadline = t0 + (s().leaseTtl + 15) * 1000;
    for (;;) {
      const listed = await Promise.all(others.map(async (i) => (await s().nodeStatus(i)).some((n) => n.name === b.name)));
      if (!listed.some(Boolean)) break;
      if (performance.now() > deadline) assert.fail(`node B still listed after ${(performance.now() - t0).toFixed(0)} ms: ${JSON.stringify(listed)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const goneMs = performance.now() - t0;
    // The record goes first; what hangs off it follows: wait for that too, then look.
    const gap = async (): Promise<string> => {
      for (const i of others) {
        const routes = (await s().nodeRoutes(i)).filter((r) => bCidrs.includes(r.dst) || (r.gateway !== undefined && r.gateway === b.ip));
        if (routes.length > 0) return `node ${i} still routes node B's pod CIDRs: ${JSON.stringify(routes)}`;
        const api = (await s().ipcache(i)).filter((e) => e.hostIP === b.ip || e.prefix === `${podB.ip}/32` || e.prefix === `${b.ip}/32`);
        if (api.length > 0) return `node ${i}'s ipcache (GET /ip) still holds node B's entries: ${JSON.stringify(api)}`;
        const map = (await bpfIpcache(s().node(i))).filter((r) => r.tunnelEndpoint === b.ip || r.prefix === `${podB.ip}/32` || r.prefix === `${b.ip}/32`);
        if (map.length > 0) return `node ${i}'s datapath ipcache still holds node B's entries: ${JSON.stringify(map)}`;
      }
      return '';
    };
    let left = await gap();
    // Each look runs `tendril bpf ipcache list` on both nodes: the pause grows, so a slow cleanup is not watched 20 times a second.
    const pause = new Backoff({ initialMs: 50, maxMs: 500 });
    while (left !== '' && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, pause.next()));
      left = await gap();
    }
    const cleanMs = performance.now() - t0;
    t.diagnostic(`lease TTL ${s().leaseTtl} s: node B unlisted ${goneMs.toFixed(0)} ms after SIGKILL, its routes and ipcache entries gone after ${cleanMs.toFixed(0)} ms`);
    assert.equal(left, '', 'nothing of node B is left on the others');
    // No route left (unreachable) or nothing answering (timeout); refused would mean something still delivered it.
    const dead = { a: await reach(pods[0]!, podB), c: await reach(pods[2]!, podB) };
    t.diagnostic(`to the dead node's pod: ${JSON.stringify(dead)}`);
    assert.ok(Object.values(dead).every((v) => /^tcp (timeout|unreachable), icmp lost$/.test(v)), `no stale state carries traffic to the dead node's pod: ${JSON.stringify(dead)}`);
    assert.equal(await reach(pods[0]!, pods[2]!), 'ok', 'the surviving nodes still reach each other');
  });

  test('node B started again with the same state: it rejoins, connectivity returns both ways', T, async (t) => {
    const t0 = performance.now();
    await s().restartAgent(B);
    const started = performance.now();
    await s().waitConverged(20_000);
    const converged = performance.now();
    const bNow = (await s().nodeStatus(0)).find((n) => n.name === s().node(B).name)!.podCidrs;
    for (const i of [0, 2]) {
      const routes = (await s().nodeRoutes(i)).map((r) => r.dst);
      assert.ok(bNow.every((c) => routes.includes(c)), `node ${i} routes node B's pod CIDRs ${JSON.stringify(bNow)} again: ${JSON.stringify(routes)}`);
    }
    let result: Record<string, string> = {};
    const deadline = performance.now() + 10_000;
    for (;;) {
      result = { a: await reach(pods[0]!, pods[B]!), c: await reach(pods[2]!, pods[B]!), back: await reach(pods[B]!, pods[0]!) };
      if (Object.values(result).every((v) => v === 'ok') || performance.now() > deadline) break;
    }
    t.diagnostic(`agent up ${(started - t0).toFixed(0)} ms after the restart, cluster converged at ${(converged - t0).toFixed(0)} ms, traffic at ${(performance.now() - t0).toFixed(0)} ms`);
    assert.deepEqual(result, { a: 'ok', c: 'ok', back: 'ok' }, `${s().agentLog(B, 1500)}`);
  });
}
