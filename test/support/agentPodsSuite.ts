// 20 pods added concurrently through libcni to one agent, on one address
// family (family.ts; wrappers test/e2e/agentPodsConcurrent*.test.ts): each
// pod gets one address of every IP version of the family, every pair talks
// on every version, and DEL leaves nothing of either family behind.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CniError, type Result100 } from '../../src/cni/index.js';
import { confListFromBytes, type CniRuntime, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { parseInterfaceAddress, parsePrefix, prefixContainsIp } from '../../src/netip/index.js';
import { type AgentProcess, podAllocations, podHostLinks, startSingleNode } from './agentHarness.js';
import { routerOf } from './datapathNode.js';
import { type Family, familyName, type IpFamily, podCidrArgs, podCidrsOf, versionOf, versionsOf } from './family.js';
import { NetnsPool } from './netns.js';
import { requireRoot } from './root.js';

/** IPv4 template (family.ts mirrors it on IPv6). */
const POD_CIDR = '10.240.0.0/24';

export function agentPodsConcurrentSuite(family: Family, tag: string): void {
  requireRoot('the agent end-to-end test');
  const versions = versionsOf(family);
  const podCidrs = podCidrsOf(family, POD_CIDR);
  const cidrOf = (v: IpFamily) => podCidrs.find((c) => versionOf(c.split('/')[0]!) === v)!;
  const pool = new NetnsPool(tag);
  let node = '';
  let agent: AgentProcess;
  let runtime: CniRuntime;
  let cleanup = async () => {};

  const conflist = (): NetworkConfigList => confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlpods', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
  const rt = (containerId: string, netns: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['IgnoreUnknown', '1'], ['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', containerId], ['SOMETHING_UNKNOWN', 'x']] });
  const ping = async (fromNs: string, ip: string) => (await pool.exec(fromNs, ['ping', `-${versionOf(ip)}`, '-c', '1', '-W', '2', ip])).code === 0;
  /**
   * The addresses of `ips` that `fromNs` cannot ping, one ping after another in one shell inside the namespace
   * (the addresses are its arguments, not part of the script): 760 pings of 20 pods, each from a process of the
   * test's own, were most of this suite's CPU.
   */
  const unreachable = async (fromNs: string, ips: readonly string[]): Promise<string[]> => {
    const r = await pool.exec(fromNs, ['sh', '-c', 'for ip in "$@"; do ping -c 1 -W 2 "$ip" >/dev/null 2>&1 || echo "$ip"; done', 'sh', ...ips]);
    // The loop itself exits 0 (each failure is echoed): anything else means the pings never ran.
    assert.equal(r.code, 0, `pinging from ${fromNs}: ${r.stderr}`);
    return r.stdout.split('\n').filter((l) => l !== '');
  };
  /** Routes of either family through a pod's host device, link-local ones (the kernel's own) left out. */
  const podRoutes = async (): Promise<string[]> => {
    const out: string[] = [];
    for (const v of [4, 6] as const) {
      const r = await pool.exec(node, ['ip', '-j', `-${v}`, 'route', 'show']);
      out.push(...(JSON.parse(r.stdout) as Array<{ dst: string; dev?: string }>).filter((x) => x.dev?.startsWith('lxc') && !x.dst.startsWith('fe80:')).map((x) => x.dst));
    }
    return out;
  };

  before(async () => {
    ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: `tdl-node-ap-${familyName(family)}`, args: [...podCidrArgs(podCidrs), '--ipam-expiration', '3000'] }));
  });

  after(async () => {
    await cleanup();
    await pool.cleanup();
  });

  describe(`20 pods added concurrently through libcni (${familyName(family)})`, () => {
    const pods: Array<{ ns: string; path: string; addresses: Partial<Record<IpFamily, string>>; id: string }> = [];

    test('every ADD succeeds with one unique address of each IP version in its pod CIDR, and that version\'s gateway', async () => {
      const namespaces = await Promise.all(Array.from({ length: 20 }, (_, i) => pool.add(`p${i}`)));
      const results = await Promise.all(namespaces.map((ns, i) => runtime.addNetworkList(conflist(), rt(`tdl-pod-${i}`, ns.path)) as Promise<Result100>));
      for (const [i, r] of results.entries()) {
        const ips = r.ips ?? [];
        assert.deepEqual(ips.map((x) => versionOf(x.address.split('/')[0]!)), versions, `pod ${i}: one address per IP version, IPv4 first`);
        const addresses: Partial<Record<IpFamily, string>> = {};
        for (const x of ips) {
          const a = parseInterfaceAddress(x.address);
          const v = a.address.family;
          assert.equal(a.length, v === 4 ? 32 : 128, `${x.address}: a host address`);
          assert.ok(prefixContainsIp(parsePrefix(cidrOf(v)), a.address), `${x.address} lies in ${cidrOf(v)}`);
          assert.equal(x.gateway, routerOf(cidrOf(v)));
          assert.equal(r.interfaces![x.interface!]!.name, 'eth0');
          assert.equal(r.interfaces![x.interface!]!.sandbox, namespaces[i]!.path);
          addresses[v] = x.address.split('/')[0]!;
        }
        pods.push({ ns: namespaces[i]!.name, path: namespaces[i]!.path, addresses, id: `tdl-pod-${i}` });
      }
      for (const v of versions) assert.equal(new Set(pods.map((p) => p.addresses[v])).size, 20, `IPv${v} addresses are unique`);
    });

    test('every pair of pods talks on every IP version, and each pod reaches the node', async () => {
      const failures: string[] = [];
      await Promise.all(
        pods.map(async (src) => {
          for (const v of versions) {
            const gateway = routerOf(cidrOf(v));
            const targets = [...pods.filter((dst) => dst !== src).map((dst) => dst.addresses[v]!), gateway];
            for (const ip of await unreachable(src.ns, targets)) failures.push(`${src.addresses[v]} -> ${ip === gateway ? 'gateway' : ip}`);
          }
        }),
      );
      assert.deepEqual(failures, []);
      for (const v of versions) assert.ok(await ping(node, pods[0]!.addresses[v]!), `the node reaches a pod on IPv${v}`);
    });

    test('CHECK passes for a healthy pod and fails once its interface is gone', async () => {
      await runtime.checkNetworkList(conflist(), rt(pods[0]!.id, pods[0]!.path));
      await pool.exec(pods[1]!.ns, ['ip', 'link', 'del', 'eth0']);
      await assert.rejects(runtime.checkNetworkList(conflist(), rt(pods[1]!.id, pods[1]!.path)), (e: unknown) => e instanceof CniError && e.code === 102);
    });

    test('DEL of every pod leaves no link, route of either family, endpoint or allocation behind', async () => {
      // Something to delete first: with no pods (an earlier test failed) the emptiness below would prove nothing.
      assert.equal(pods.length, 20, 'the 20 pods of the first test exist');
      assert.equal((await agent.client.listEndpoints()).length, 20);
      assert.notDeepEqual(await podHostLinks(pool, node), []);
      await Promise.all(pods.map((p) => runtime.delNetworkList(conflist(), rt(p.id, p.path))));
      assert.deepEqual(await podHostLinks(pool, node), []);
      assert.deepEqual(await podRoutes(), []);
      assert.deepEqual(await agent.client.listEndpoints(), []);
      assert.deepEqual(await podAllocations(agent), []);
      // DEL is idempotent, also for a namespace that no longer exists.
      await runtime.delNetworkList(conflist(), rt(pods[0]!.id, '/var/run/netns/tdl-gone'));
    });
  });
}
