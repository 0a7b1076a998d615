/**
 * Policy across nodes, in either routing mode (one test file per mode): a
 * NetworkPolicy imported through node A holds on node C (every node shows
 * the same cluster revision); a pod that takes an allowed pod's address is
 * stopped at its own node. In tunnel mode only nodes may send VXLAN: a
 * forged VXLAN packet from a host on the underlay is dropped whatever its
 * VNI (OVERLAY_NOT_NODE). A label change on node A changes what node C
 * admits, measured. A host outside the cluster that routes C's pods via
 * node A is world at C in either mode: a pod admitting only the cluster
 * (fromEntities [cluster], then [remote-node]) keeps it out.
 * One test file per routing mode and pod family (IPv4, IPv6, dual-stack
 * pods): every verdict is checked on each IP version the pods have, with
 * the same expectations.
 */
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import { after, before, describe, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { deletePolicyAndWait, importPolicy, importPolicyAndWait } from './datapathNode.js';
import { bpfMetrics, dropCounts } from './datapathObserve.js';
import { addressIn, type Family, familyName, hostCidr, type IpFamily, versionsOf } from './family.js';
import { type ClusterPod, ClusterScene, POD_TCP_PORT, POD_UDP_PORT, type RoutingMode, VXLAN_PORT } from './clusterScene.js';
import { networkPolicy, tendrilPolicy } from './policyDocuments.js';
import { NetnsProber } from './reachability.js';
import { requireRoot } from './root.js';
import { runOk } from './run.js';
import { failures } from './serviceProcess.js';


export function clusterPolicySuite(opts: { tag: string; routingMode: RoutingMode; family?: Family }): void {
  const family = opts.family ?? 4;
  requireRoot(`the cross-node policy suite (${opts.routingMode}, ${familyName(family)})`);
  const versions = versionsOf(family);
  /** The version the single-version rows (a label change, measured) run on: IPv6 when the pods have it. */
  const main: IpFamily = versions.includes(6) ? 6 : 4;
  const title = (text: string) => (family === 4 ? text : `[${familyName(family)}] ${text}`);

  const NS = 'tdl-cluster';
  /** The db pod's counting UDP receiver (probe agent): how many datagrams arrived from an address. */
  const COUNT_PORT = 5454;
  const ATTACKER_IP = '10.248.0.66';
  const ATTACKER_IP6 = 'fd00:248::42';
  const T = { timeout: 90_000 };
  const POLICY = networkPolicy(NS, 'db-from-api', 'podSelector: {matchLabels: {app: db}}\npolicyTypes: [Ingress]\ningress:\n- from: [{podSelector: {matchLabels: {app: api}}}]');

  let scene: ClusterScene | undefined;
  let counter: NetnsProber | undefined;
  let attacker: NetnsProber | undefined;
  let attackerNs = '';
  const pods: Record<string, ClusterPod> = {};
  const s = () => scene!;
  const A = 0;
  const C = 2;

  before(async () => {
    scene = await ClusterScene.create({ tag: opts.tag, routingMode: opts.routingMode, ipam: 'block', family });
    const placed: Array<[string, number, Record<string, string>]> = [
      ['db', C, { app: 'db' }],
      ['api', 1, { app: 'api' }],
      ['otherb', 1, { app: 'other' }],
      ['othera', A, { app: 'other' }],
      ['spoofer', A, { app: 'spoof' }],
      ['web', A, { app: 'web', tier: 'canary' }],
      ['vault', C, { app: 'vault' }],
    ];
    for (const [name, node, labels] of placed) pods[name] = await scene.addPod(node, { name, labels, namespace: NS });
    counter = await NetnsProber.start('db counter', pods.db!.netnsPath, { tcpPorts: [], udpPorts: [COUNT_PORT], versions });
    const host = await scene.cluster.addUnderlayHost('atk', ATTACKER_IP, family === 4 ? undefined : ATTACKER_IP6);
    attackerNs = host.netns;
    attacker = await NetnsProber.start('attacker', host.netnsPath, { tcpPorts: [], udpPorts: [], versions });
    await scene.waitConverged(20_000);
  });

  after(async () => {
    await counter?.stop();
    await attacker?.stop();
    await scene?.cleanup();
  });

  const ipOf = (name: string, v: IpFamily) => addressIn(name, pods[name]!.addresses, v);
  /** A node's address of IP version v on the cluster network (its IPv6 one on a dual-stack underlay). */
  const nodeAddr = (i: number, v: IpFamily) => {
    const n = s().node(i);
    return addressIn(n.name, { 4: n.ip, ...(n.ip6 !== undefined ? { 6: n.ip6 } : {}) }, v);
  };
  /** `ip` arguments for an address of version v on a device: a host prefix, IPv6 without DAD (usable at once). */
  const hostAddr = (ip: string) => (ip.includes(':') ? [`${ip}/128`, 'nodad'] : [`${ip}/32`]);

  /** One TCP connection and one UDP datagram from a pod to db over IP version v: `open` or what failed. */
  async function toDb(from: ClusterPod, timeoutMs = 1000, src?: string, v: IpFamily = main): Promise<string> {
    const target = { dst: ipOf('db', v), ...(src ? { src } : {}) };
    const tcp = await from.agent.tcpOnce({ ...target, port: POD_TCP_PORT }, timeoutMs);
    const udp = await from.agent.udpShots({ ...target, port: POD_UDP_PORT }, { count: 1, concurrency: 1, timeoutMs });
    return `tcp ${tcp.outcome}, udp ${udp[0]!.outcome}`;
  }

  async function clusterRevisions(): Promise<number[]> {
    return Promise.all(s().nodes.map(async (n) => (await n.agent.client.getPolicy()).clusterRevision));
  }

  /** Waits until db's datapath on node C enforces every policy change C has applied. */
  async function waitDbEnforced(timeoutMs: number): Promise<void> {
    const c = s().node(C);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const revision = (await c.agent.client.getPolicy()).revision;
      const p = await c.agent.client.getEndpointPolicy(pods.db!.endpoint.id);
      if (p.datapathEnforced && p.realizedPolicyRevision >= revision) return;
      if (Date.now() > deadline) throw new Error(`db on node C: realized ${p.realizedPolicyRevision} of ${revision} (enforced ${p.datapathEnforced})`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  const policyDrops = (m: Record<string, number>) => Object.entries(m).filter(([k]) => k.startsWith('POLICY')).reduce((sum, [, v]) => sum + v, 0);
  const dropsOf = (m: Record<string, number>, prefix: string) => Object.entries(m).filter(([k]) => k.startsWith(prefix)).reduce((sum, [, v]) => sum + v, 0);

  /** The same verdict for every IP version the pods have: `{ 'name IPvN': verdict }`. */
  const everyVersion = (byName: Record<string, string>) => Object.fromEntries(versions.flatMap((v) => Object.entries(byName).map(([k, x]) => [`${k} IPv${v}`, x])));

  test(title('before any policy, every pod reaches db on node C'), T, async () => {
    const seen: Record<string, string> = {};
    // 3 s: a path's first IPv6 packets wait for neighbour discovery on its hops, past a 1 s SYN retransmit.
    for (const v of versions) for (const name of ['api', 'otherb', 'othera', 'spoofer', 'web']) seen[`${name} IPv${v}`] = await toDb(pods[name]!, 3000, undefined, v);
    assert.deepEqual(seen, everyVersion({ api: 'tcp open, udp open', otherb: 'tcp open, udp open', othera: 'tcp open, udp open', spoofer: 'tcp open, udp open', web: 'tcp open, udp open' }));
  });

  describe('a NetworkPolicy imported on node A, enforced on node C', () => {
    test(title('every node applies it: the same clusterRevision everywhere; db on C enforces it'), T, async (t) => {
      const before = await clusterRevisions();
      const t0 = performance.now();
      const r = await importPolicy(s().node(A), POLICY);
      const imported = performance.now();
      let revs: number[] = [];
      const deadline = Date.now() + 10_000;
      for (;;) {
        revs = await clusterRevisions();
        if (revs.every((x) => x === revs[0] && x > Math.max(...before))) break;
        if (Date.now() > deadline) assert.fail(`clusterRevision differs across nodes after 10 s: ${JSON.stringify(revs)} (before ${JSON.stringify(before)})`);
        await new Promise((res) => setTimeout(res, 20));
      }
      const synced = performance.now();
      await waitDbEnforced(10_000);
      const enforced = performance.now();
      t.diagnostic(`import on A answered in ${(imported - t0).toFixed(1)} ms (local revision ${r.revision}); every node at clusterRevision ${revs[0]} ${(synced - t0).toFixed(1)} ms after the import started; db on C enforcing ${(enforced - t0).toFixed(1)} ms after`);
      for (const n of s().nodes) {
        const body = await n.agent.client.getPolicy();
        assert.ok(body.policies.some((p) => p.name.endsWith('/db-from-api')), `${n.name} holds the policy: ${JSON.stringify(body.policies.map((p) => p.name))}`);
      }
      const printed: Record<string, string | undefined> = {};
      for (const n of s().nodes) {
        const cli = await n.cli(['policy', 'get']);
        assert.equal(cli.code, 0, cli.stderr);
        printed[n.name] = /Cluster revision: (\d+)/.exec(cli.stdout)?.[1];
      }
      assert.deepEqual(printed, Object.fromEntries(s().nodes.map((n) => [n.name, String(revs[0])])), '`tendril policy get` says the same cluster revision on every node');
    });

    test(title('api on node B reaches db on node C; other pods on B and A are denied, the drops counted on C'), T, async () => {
      const before = dropCounts(await bpfMetrics(s().node(C)));
      // All at once: each denied probe waits out its timeout, and one after the other that was 12 s.
      const probes = versions.flatMap((v) => ['api', 'otherb', 'othera', 'web'].map((name) => ({ v, name })));
      const outcomes = await Promise.all(probes.map(({ v, name }) => toDb(pods[name]!, 1000, undefined, v)));
      const seen = Object.fromEntries(probes.map(({ v, name }, i) => [`${name} IPv${v}`, outcomes[i]!]));
      const after = dropCounts(await bpfMetrics(s().node(C)));
      assert.deepEqual(seen, everyVersion({ api: 'tcp open, udp open', otherb: 'tcp timeout, udp timeout', othera: 'tcp timeout, udp timeout', web: 'tcp timeout, udp timeout' }));
      assert.ok(policyDrops(after) - policyDrops(before) >= 6 * versions.length, `node C counted the denied packets as POLICY drops: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
    });

    for (const v of versions) test(title(`IPv${v}: a pod on node A that takes the api pod's address is stopped at node A (anti-spoofing), never reaching db`), T, async () => {
      const spoofer = pods.spoofer!;
      const apiIp = ipOf('api', v);
      await runOk(['ip', '-n', spoofer.netns, 'addr', 'add', ...hostAddr(apiIp), 'dev', 'eth0']);
      try {
        const beforeA = dropCounts(await bpfMetrics(s().node(A)));
        const received = await counter!.udpReceived(COUNT_PORT, apiIp);
        const seen = await toDb(spoofer, 700, apiIp, v);
        const shots = await spoofer.agent.udpShots({ dst: ipOf('db', v), port: COUNT_PORT, src: apiIp }, { count: 3, concurrency: 3, timeoutMs: 300 });
        await new Promise((r) => setTimeout(r, 200));
        const afterA = dropCounts(await bpfMetrics(s().node(A)));
        assert.equal(seen, 'tcp timeout, udp timeout', 'spoofed flows get nowhere');
        assert.equal(await counter!.udpReceived(COUNT_PORT, apiIp), received, `no spoofed datagram reached db (${failures(shots)})`);
        assert.ok(dropsOf(afterA, 'INVALID_SOURCE') - dropsOf(beforeA, 'INVALID_SOURCE') >= 5, `node A dropped them as INVALID_SOURCE: ${JSON.stringify(beforeA)} -> ${JSON.stringify(afterA)}`);
      } finally {
        await runOk(['ip', '-n', spoofer.netns, 'addr', 'del', hostAddr(apiIp)[0]!, 'dev', 'eth0']);
      }
    });

    // Only an overlay carries an identity in its packets; in native mode the source address is all there is.
    if (opts.routingMode === 'tunnel') {
      for (const v of versions) test(title(`IPv${v}: only nodes may send VXLAN: a forged VXLAN packet from a host on the underlay is dropped at C as OVERLAY_NOT_NODE, whatever its VNI (the api identity's too)`), T, async (t) => {
        const apiIp = ipOf('api', v);
        const dbIp = ipOf('db', v);
        const c = s().node(C);
        const apiIdentity = (await s().endpointOf(pods.api!)).identity!;
        const otherIdentity = (await s().endpointOf(pods.otherb!)).identity!;
        assert.notEqual(apiIdentity, otherIdentity);
        /** Sends `count` datagrams through a plain VXLAN device with a fixed VNI to node C; answers how many db received. */
        const forge = async (vni: number, count: number): Promise<number> => {
          const ip = (args: string[]) => runOk(['ip', '-n', attackerNs, ...args]);
          await ip(['link', 'add', 'tdlspoof', 'type', 'vxlan', 'id', String(vni), 'remote', c.ip, 'dstport', String(VXLAN_PORT), 'dev', 'eth0']);
          try {
            await ip(['addr', 'add', ...hostAddr(apiIp), 'dev', 'tdlspoof']);
            await ip(['link', 'set', 'tdlspoof', 'up']);
            await ip(['route', 'add', hostCidr(dbIp), 'dev', 'tdlspoof']);
            await ip(['neigh', 'add', dbIp, 'lladdr', '02:00:00:00:00:01', 'dev', 'tdlspoof', 'nud', 'permanent']);
            const before = await counter!.udpReceived(COUNT_PORT, apiIp);
            // One-way: db's answer goes to the real api pod on node B, so the sender only times out.
            for (let i = 0; i < count; i++) await attacker!.probe({ proto: 'udp', dst: dbIp, port: COUNT_PORT, src: apiIp, timeoutMs: 100 });
            await new Promise((r) => setTimeout(r, 300));
            return (await counter!.udpReceived(COUNT_PORT, apiIp)) - before;
          } finally {
            await ip(['link', 'del', 'tdlspoof']);
          }
        };
        const beforeC = dropCounts(await bpfMetrics(c));
        const forgedOther = await forge(otherIdentity, 3);
        const forgedApi = await forge(apiIdentity, 3);
        const afterC = dropCounts(await bpfMetrics(c));
        t.diagnostic(`VNI ${otherIdentity} (app=other): ${forgedOther} of 3 arrived; VNI ${apiIdentity} (app=api): ${forgedApi} of 3; C's drops ${JSON.stringify(beforeC)} -> ${JSON.stringify(afterC)}`);
        assert.deepEqual({ forgedOther, forgedApi }, { forgedOther: 0, forgedApi: 0 }, 'a host that is no node claims no identity, whatever its VNI says');
        assert.ok(dropsOf(afterC, 'OVERLAY_NOT_NODE') - dropsOf(beforeC, 'OVERLAY_NOT_NODE') >= 6, `node C counted the forged packets as OVERLAY_NOT_NODE: ${JSON.stringify(beforeC)} -> ${JSON.stringify(afterC)}`);
        // The api pod itself, through its node, still gets in: the overlay between nodes is untouched.
        assert.equal(await toDb(pods.api!, 1000, undefined, v), 'tcp open, udp open');
      });

      for (const v of versions) test(title(`IPv${v}: a host on the underlay that takes the api pod's address and sends to db through node C itself (db's host route, tendril_to_container) is world there, not api`), T, async (t) => {
        const apiIp = ipOf('api', v);
        const dbIp = ipOf('db', v);
        const c = s().node(C);
        const ip = (args: string[]) => runOk(['ip', '-n', attackerNs, ...args]);
        // No VXLAN: plain datagrams with api's (remote) address as source, routed to db via C's underlay address.
        await ip(['addr', 'add', ...hostAddr(apiIp), 'dev', 'eth0']);
        await ip(['route', 'replace', hostCidr(dbIp), 'via', nodeAddr(C, v)]);
        try {
          const before = await counter!.udpReceived(COUNT_PORT, apiIp);
          const beforeC = dropCounts(await bpfMetrics(c));
          // One-way: db's answer goes to the real api pod on node B.
          for (let i = 0; i < 3; i++) await attacker!.probe({ proto: 'udp', dst: dbIp, port: COUNT_PORT, src: apiIp, timeoutMs: 100 });
          await new Promise((r) => setTimeout(r, 300));
          const arrived = (await counter!.udpReceived(COUNT_PORT, apiIp)) - before;
          const afterC = dropCounts(await bpfMetrics(c));
          t.diagnostic(`${arrived} of 3 forged datagrams reached db; C's drops ${JSON.stringify(beforeC)} -> ${JSON.stringify(afterC)}`);
          assert.equal(arrived, 0, 'a remote pod\'s address on the wire is no proof of that pod: in tunnel mode it arrives through the overlay');
          assert.ok(policyDrops(afterC) - policyDrops(beforeC) >= 3, `node C dropped them as POLICY (world): ${JSON.stringify(beforeC)} -> ${JSON.stringify(afterC)}`);
        } finally {
          await ip(['route', 'del', hostCidr(dbIp)]).catch(() => undefined);
          await ip(['addr', 'del', hostAddr(apiIp)[0]!, 'dev', 'eth0']);
        }
        assert.equal(await toDb(pods.api!, 1000, undefined, v), 'tcp open, udp open', 'api itself still gets in');
      });
    }

    test(title(`IPv${main}: a label change on node A changes what node C admits (measured)`), T, async (t) => {
      const web = pods.web!;
      const a = s().node(A);
      assert.equal(await toDb(web, 500), 'tcp timeout, udp timeout', 'app=web is denied at first');
      /** Polls until db admits (or denies) new connections from web; answers the time and what C's ipcache says meanwhile. */
      const measure = async (patch: { delete: string[]; add: string[] }, wantOpen: boolean) => {
        const t0 = performance.now();
        const ep = (await a.agent.client.request<Endpoint>('PATCH', `/endpoint/${web.endpoint.id}/labels`, patch)).identity;
        const patched = performance.now();
        let ipcacheMs: number | undefined;
        let packetMs: number | undefined;
        let firstMiss: number | undefined;
        const deadline = t0 + 15_000;
        while (performance.now() < deadline && (ipcacheMs === undefined || packetMs === undefined)) {
          if (ipcacheMs === undefined) {
            const e = (await s().ipcache(C)).find((x) => x.prefix === hostCidr(ipOf('web', main)));
            if (e?.identity === ep) ipcacheMs = performance.now() - t0;
          }
          if (packetMs === undefined) {
            const probeStart = performance.now() - t0;
            const r = await web.agent.tcpOnce({ dst: ipOf('db', main), port: POD_TCP_PORT }, 150);
            if (r.outcome === 'open' && wantOpen) packetMs = performance.now() - t0;
            // A timeout on a busy machine is not yet a denial: the next probe must time out too; the first one's start counts.
            if (r.outcome !== 'open' && !wantOpen) {
              if (firstMiss !== undefined) packetMs = firstMiss;
              else firstMiss = probeStart;
            } else firstMiss = undefined;
          }
        }
        return { identity: ep, patchMs: patched - t0, ipcacheMs, packetMs };
      };
      const toApi = await measure({ delete: ['app'], add: ['app=api'] }, true);
      const back = await measure({ delete: ['app'], add: ['app=web'] }, false);
      t.diagnostic(`app=web -> app=api on A (identity ${toApi.identity}): PATCH ${toApi.patchMs.toFixed(1)} ms, C's ipcache ${toApi.ipcacheMs?.toFixed(1)} ms, first connection admitted by C ${toApi.packetMs?.toFixed(1)} ms`);
      t.diagnostic(`app=api -> app=web on A (identity ${back.identity}): PATCH ${back.patchMs.toFixed(1)} ms, C's ipcache ${back.ipcacheMs?.toFixed(1)} ms, first connection denied by C ${back.packetMs?.toFixed(1)} ms`);
      assert.ok(toApi.packetMs !== undefined && toApi.packetMs < 10_000, `web admitted within 10 s of becoming app=api: ${JSON.stringify(toApi)}`);
      assert.ok(back.packetMs !== undefined && back.packetMs < 10_000, `web denied within 10 s of becoming app=web again: ${JSON.stringify(back)}`);
      assert.equal(await toDb(web, 500), 'tcp timeout, udp timeout');
      assert.equal(await toDb(pods.api!), 'tcp open, udp open');
    });
  });

  describe('a host outside the cluster, routed through a node (vault on node C admits the cluster only)', () => {
    const VAULT_NAME = 'vault-from-cluster';
    const vaultPolicy = (entity: string) => tendrilPolicy(NS, VAULT_NAME, `endpointSelector: {matchLabels: {app: vault}}\ningress:\n- fromEntities: [${entity}]`);

    /** The attacker host's TCP connection to vault over IP version v, routed via the node at `gateway`: `open` or what failed. */
    async function attackerToVault(gateway: string, v: IpFamily): Promise<string> {
      const vault = ipOf('vault', v);
      await runOk(['ip', '-n', attackerNs, 'route', 'replace', hostCidr(vault), 'via', gateway]);
      try {
        return (await attacker!.probe({ proto: 'tcp', dst: vault, port: POD_TCP_PORT, timeoutMs: 1000 })).outcome;
      } finally {
        await runOk(['ip', '-n', attackerNs, 'route', 'del', hostCidr(vault)]);
      }
    }

    for (const v of versions) for (const entity of ['cluster', 'remote-node']) {
      test(title(`IPv${v}: fromEntities [${entity}]: the outside host is world at C whether it routes via node A or via C itself; node A itself still gets in`), T, async (t) => {
        const c = s().node(C);
        await importPolicyAndWait(c, vaultPolicy(entity));
        try {
          const before = dropCounts(await bpfMetrics(c));
          const viaA = await attackerToVault(nodeAddr(A, v), v);
          const viaC = await attackerToVault(nodeAddr(C, v), v);
          const after = dropCounts(await bpfMetrics(c));
          t.diagnostic(`via node A: ${viaA}; via node C: ${viaC}; C's drops ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
          assert.deepEqual({ viaA, viaC }, { viaA: 'timeout', viaC: 'timeout' }, 'the outside host reaches vault by no route');
          assert.ok(policyDrops(after) - policyDrops(before) >= 2, `node C dropped both as POLICY (world): ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
          // Node A's own connection is the remote node's (VNI host): admitted either way; a pod on B by [cluster] only.
          const fromNodeA = await (await s().nodeAgent(A)).tcpOnce({ dst: ipOf('vault', v), port: POD_TCP_PORT }, 1000);
          assert.equal(fromNodeA.outcome, 'open', 'node A itself is a remote node at C');
          if (entity === 'cluster') {
            const api = await pods.api!.agent.tcpOnce({ dst: ipOf('vault', v), port: POD_TCP_PORT }, 1000);
            assert.equal(api.outcome, 'open', 'a pod on node B is of the cluster');
          }
        } finally {
          await deletePolicyAndWait(c, ['--namespace', NS, '--name', VAULT_NAME]);
        }
      });
    }
  });
}
