// The agent going away — cleanly, during DEL, or killed in the middle of ADD —
// must neither drop pod traffic nor leak addresses, links or endpoints, and a
// restart rewrites none of the routes and addresses already in force. One
// suite for every address family (family.ts; wrappers
// test/e2e/agentRestart*.test.ts): pods get an address of every IP version of
// the family and are checked on each.
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { CniError, CniErrorCode, type Result100 } from '../../src/cni/index.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { type AgentProcess, podAllocations as allocationsOf, podHostLinks, startSingleNode } from './agentHarness.js';
import { type Family, familyName, type IpFamily, podCidrArgs, podCidrsOf, versionOf, versionsOf } from './family.js';
import { NetnsPool } from './netns.js';
import { requireRoot } from './root.js';
import { RtnetlinkWatch } from './rtnetlinkWatch.js';

const EXPIRATION_MS = 2000;
/** IPv4 template (family.ts mirrors it on IPv6). */
const POD_CIDR = '10.241.0.0/24';

/** The suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function agentRestartSuite(family: Family, tag: string): void {
  requireRoot('the agent restart test');
  const versions = versionsOf(family);
  const pool = new NetnsPool(tag);
  let node = '';
  let nodePath = '';
  let agent: AgentProcess;
  let runtime: CniRuntime;
  let cleanup = async () => {};
  /** Stopped by the test, or in `after` when it failed first. */
  const watches: RtnetlinkWatch[] = [];

  function conflist(version = '1.1.0'): NetworkConfigList {
    return confListFromBytes(JSON.stringify({ cniVersion: version, name: 'tdlrestart', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
  }
  const rt = (containerId: string, netns: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['TENDRIL_LABELS', 'app=restart']] });

  const ping = async (fromNs: string, ip: string) => (await pool.exec(fromNs, ['ping', `-${versionOf(ip)}`, '-c', '1', '-W', '2', ip])).code === 0;
  const nodeLinks = () => podHostLinks(pool, node);
  const podAllocations = () => allocationsOf(agent);

  /** A pod's address of IP version `v`. */
  const ipOf = (r: Result100, v: IpFamily) => {
    const ip = r.ips!.map((x) => x.address.split('/')[0]!).find((a) => versionOf(a) === v);
    assert.ok(ip, `the pod has an IPv${v} address: ${JSON.stringify(r.ips)}`);
    return ip;
  };

  before(async () => {
    ({ node, agent, runtime, cleanup } = await startSingleNode(pool, {
      nodeName: `tdl-node-r-${familyName(family)}`,
      args: [...podCidrArgs(podCidrsOf(family, POD_CIDR)), '--ipam-expiration', String(EXPIRATION_MS)],
    }));
    nodePath = `/var/run/netns/${node}`;
  });

  after(async () => {
    for (const w of watches) await w.stop();
    await cleanup();
    await pool.cleanup();
  });

  describe(`agent restart between ADD and DEL (${familyName(family)})`, () => {
    test('pods keep talking while the agent is down; after restart the endpoints are the same, no route or address was rewritten, and DEL works', async () => {
      const a = await pool.add('a');
      const b = await pool.add('b');
      const ra = (await runtime.addNetworkList(conflist(), rt('tdl-rs-a', a.path))) as Result100;
      const rb = (await runtime.addNetworkList(conflist(), rt('tdl-rs-b', b.path))) as Result100;
      const before = (await agent.client.listEndpoints()) as Endpoint[];

      // The routing datapath forwards through the host routes: a restart that rewrote them would touch the pods' traffic.
      const watch = await RtnetlinkWatch.start(nodePath);
      watches.push(watch);
      await agent.stop();
      for (const v of versions) {
        assert.ok(await ping(a.name, ipOf(rb, v)), `a reaches b on IPv${v} while the agent is down`);
        assert.ok(await ping(b.name, ipOf(ra, v)), `b reaches a on IPv${v} while the agent is down`);
      }
      // While it is down: ADD is "try again later", STATUS is "not available".
      const c = await pool.add('c');
      await assert.rejects(runtime.addNetworkList(conflist(), rt('tdl-rs-c', c.path)), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.TryAgainLater);
      await assert.rejects(runtime.getStatusNetworkList(conflist()), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.PluginNotAvailable);

      await agent.start();
      const restored = (await agent.client.listEndpoints()) as Endpoint[];
      await new Promise((r) => setTimeout(r, 200));
      await watch.stop();
      assert.deepEqual(watch.changes(), [], 'the restart wrote no route or address and flushed no neighbour in the node');
      assert.deepEqual(
        restored.map((e) => [e.id, e.containerId, e.addresses.map((x) => x.ip), e.hostIfName, e.identity]),
        before.map((e) => [e.id, e.containerId, e.addresses.map((x) => x.ip), e.hostIfName, e.identity]),
      );
      for (const v of versions) assert.ok(await ping(a.name, ipOf(rb, v)), `a reaches b on IPv${v} after the restart`);
      // Long after the expiration: the restored addresses were confirmed, not expired.
      await new Promise((r) => setTimeout(r, EXPIRATION_MS + 1000));
      assert.equal((await podAllocations()).length, 2 * versions.length, 'one address per pod and IP version');
      await runtime.delNetworkList(conflist(), rt('tdl-rs-a', a.path));
      await runtime.delNetworkList(conflist(), rt('tdl-rs-b', b.path));
      assert.deepEqual(await podAllocations(), []);
      assert.deepEqual(await nodeLinks(), []);
    });
  });

  describe(`agent down during DEL (${familyName(family)})`, () => {
    test('the DEL is queued, exits 0, and the agent drains it on start', async () => {
      const p = await pool.add('q');
      await runtime.addNetworkList(conflist(), rt('tdl-rs-q', p.path));
      await agent.stop();
      await runtime.delNetworkList(conflist(), rt('tdl-rs-q', p.path));
      const queued = await readdir(join(agent.stateDir, 'deletion-queue'));
      assert.equal(queued.length, 1);
      await agent.start();
      assert.deepEqual(await readdir(join(agent.stateDir, 'deletion-queue')), []);
      assert.deepEqual(await agent.client.listEndpoints(), []);
      assert.deepEqual(await podAllocations(), []);
      assert.deepEqual(await nodeLinks(), []);
    });
  });

  describe(`agent killed in the middle of ADD (${familyName(family)})`, () => {
    for (const point of ['after-ipam', 'after-datapath', 'after-endpoint']) {
      test(`killed ${point}: nothing leaks once the allocation expires and GC runs`, async () => {
        await agent.stop();
        await agent.start({ TENDRIL_FAULT_POINT: point });
        const p = await pool.add(point.replace(/[^a-z]/g, '').slice(0, 8));
        await assert.rejects(runtime.addNetworkList(conflist(), rt(`tdl-kill-${point}`, p.path)), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.TryAgainLater);
        await agent.waitExit();
        await agent.start();
        // The runtime saw ADD fail, so it holds no attachment: GC with an empty valid list.
        await runtime.gcNetworkList(conflist(), { validAttachments: [] });
        await new Promise((r) => setTimeout(r, EXPIRATION_MS + 1500));
        assert.deepEqual(await podAllocations(), [], 'the provisional address expired');
        assert.deepEqual(await nodeLinks(), [], 'no orphaned veth');
        assert.deepEqual(await agent.client.listEndpoints(), []);
        assert.equal(await pool.exec(p.name, ['ip', 'link', 'show', 'eth0']).then((r) => r.code), 1, 'no interface left in the pod');
      });
    }
  });
}
