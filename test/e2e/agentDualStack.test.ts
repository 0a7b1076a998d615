// A dual-stack node on the eBPF datapath: the real agent with an IPv4 and an
// IPv6 pod CIDR, pods as namespaces, ADD and DEL through libcni and
// tendril-cni. What the agent's side does for IPv6 is checked in the kernel:
// the pod's addresses and routes, the host side's route and sysctls, the
// router address on tendril_host, the CNI result in each version, the
// endpoint's two addresses in the API, both allocations freed by DEL and kept
// over a restart. IPv4 traffic between dual-stack pods still flows.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import type { Result040, Result100 } from '../../src/cni/index.js';
import { CniError } from '../../src/cni/index.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { type AgentProcess, ping, podAllocations, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { run } from '../support/run.js';
import { TENDRIL_BIN } from '../support/tendrilBin.js';
import { requireRoot } from '../support/root.js';

requireRoot('the dual-stack agent end-to-end test');

const POD_CIDR4 = '10.242.0.0/24';
// Small, so the test can use up its addresses.
const POD_CIDR6 = 'fd00:242::/125';
const pool = new NetnsPool('ds');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

function conflist(version: string): NetworkConfigList {
  return confListFromBytes(JSON.stringify({ cniVersion: version, name: 'tdlds', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
}

function rt(containerId: string, netns: string): RuntimeConf {
  return { containerId, netns, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', containerId]] };
}

interface IpAddr {
  ifname: string;
  addr_info: Array<{ family: string; local: string; prefixlen: number; scope: string; tentative?: boolean; dadfailed?: boolean; nodad?: boolean }>;
}
interface IpRoute {
  dst: string;
  gateway?: string;
  dev?: string;
  scope?: string;
}

async function json<T>(ns: string, argv: string[]): Promise<T> {
  const r = await pool.exec(ns, argv);
  assert.equal(r.code, 0, `${argv.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}

const globalV6 = async (ns: string, dev: string) => (await json<IpAddr[]>(ns, ['ip', '-j', '-6', 'addr', 'show', 'dev', dev])).flatMap((l) => l.addr_info).filter((a) => a.scope === 'global');
const routes6 = (ns: string, extra: string[] = []) => json<IpRoute[]>(ns, ['ip', '-j', '-6', 'route', 'show', ...extra]);
const sysctl = async (ns: string, key: string) => (await pool.exec(ns, ['sysctl', '-n', key])).stdout.trim();
const inPod6 = (ip: string) => ip.startsWith('fd00:242::');
let routerV6 = '';
const router6 = () => routerV6;

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-ds', args: ['--pod-cidr', `${POD_CIDR4},${POD_CIDR6}`, '--routing-mode', 'native'] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

describe('dual-stack pods on the eBPF datapath', () => {
  const pods: Array<{ id: string; ns: string; path: string; ip4: string; ip6: string }> = [];

  test('the router has an address of each family on tendril_host, and the node forwards IPv6', async () => {
    const routers = (await agent.client.listIpam()).allocations.filter((a) => a.owner.startsWith('tendril:router')).map((a) => a.ip);
    routerV6 = routers.find(inPod6) ?? '';
    assert.ok(routers.some((ip) => ip.startsWith('10.242.0.')) && routerV6 !== '', routers.join(' '));
    const onHost = await globalV6(node, 'tendril_host');
    assert.deepEqual(onHost.map((a) => `${a.local}/${a.prefixlen}`), [`${routerV6}/128`]);
    assert.ok(!onHost[0]!.tentative && !onHost[0]!.dadfailed, 'the router address is usable at once');
    assert.equal(await sysctl(node, 'net.ipv6.conf.all.forwarding'), '1');
  });

  test('ADD (CNI 1.0.0) answers one address of each family, each on eth0 with its gateway, and a default route per family', async () => {
    // New devices start with IPv6 forwarding off here: the host side must turn it on for its pod.
    assert.equal((await pool.exec(node, ['sysctl', '-q', '-w', 'net.ipv6.conf.default.forwarding=0'])).code, 0);
    for (const i of [0, 1]) {
      const ns = await pool.add(`p${i}`);
      const id = `tdl-ds-${i}`;
      const r = (await runtime.addNetworkList(conflist('1.0.0'), rt(id, ns.path))) as Result100;
      assert.equal(r.ips?.length, 2, JSON.stringify(r));
      const [v4, v6] = [r.ips!.find((a) => a.address.includes('.'))!, r.ips!.find((a) => a.address.includes(':'))!];
      assert.match(v4.address, /^10\.242\.0\.\d+\/32$/);
      assert.equal(v4.gateway, '10.242.0.1');
      assert.ok(inPod6(v6.address) && v6.address.endsWith('/128'), v6.address);
      assert.ok(v6.gateway !== undefined && inPod6(v6.gateway), `IPv6 gateway ${v6.gateway}`);
      for (const a of [v4, v6]) {
        assert.equal(r.interfaces![a.interface!]!.name, 'eth0');
        assert.equal(r.interfaces![a.interface!]!.sandbox, ns.path);
      }
      assert.ok(r.routes!.some((x) => x.dst === '0.0.0.0/0' && x.gw === '10.242.0.1'), JSON.stringify(r.routes));
      assert.ok(r.routes!.some((x) => x.dst === '::/0' && x.gw === v6.gateway), JSON.stringify(r.routes));
      pods.push({ id, ns: ns.name, path: ns.path, ip4: v4.address.split('/')[0]!, ip6: v6.address.split('/')[0]! });
    }
  });

  test('the pod has its IPv6 address usable at once (no DAD), the gateway on-link and the default route through it', async () => {
    const p = pods[0]!;
    const gw6 = (await agent.client.listIpam()).allocations.find((a) => a.owner.startsWith('tendril:router') && inPod6(a.ip))!.ip;
    const addrs = await globalV6(p.ns, 'eth0');
    assert.deepEqual(addrs.map((a) => `${a.local}/${a.prefixlen}`), [`${p.ip6}/128`]);
    assert.ok(!addrs[0]!.tentative && !addrs[0]!.dadfailed, JSON.stringify(addrs[0]));
    const rs = await routes6(p.ns);
    // On-link: a route to the gateway over eth0 with no next hop (ip prints no scope for IPv6).
    assert.ok(rs.some((x) => x.dst === gw6 && x.dev === 'eth0' && x.gateway === undefined), JSON.stringify(rs));
    assert.ok(rs.some((x) => x.dst === 'default' && x.gateway === gw6 && x.dev === 'eth0'), JSON.stringify(rs));
  });

  test('the host side routes each pod\'s /128 over its lxc device, with IPv6 forwarding on the device and its link-local address usable at once (no DAD)', async () => {
    const lxcs = await podHostLinks(pool, node);
    assert.equal(lxcs.length, 2);
    for (const p of pods) {
      const rs = await routes6(node, [`${p.ip6}/128`]);
      assert.equal(rs.length, 1, JSON.stringify(rs));
      assert.ok(lxcs.includes(rs[0]!.dev!), `${p.ip6} routed over ${rs[0]!.dev}`);
      assert.equal(await sysctl(node, `net.ipv6.conf.${rs[0]!.dev!}.forwarding`), '1');
      // Checked within a second of the last ADD: a tentative link-local sends no neighbour
      // solicitation, and what the node forwards to the pod would wait for DAD to end.
      assert.equal(await sysctl(node, `net.ipv6.conf.${rs[0]!.dev!}.accept_dad`), '0');
      const linkLocal = (await json<IpAddr[]>(node, ['ip', '-j', '-6', 'addr', 'show', 'dev', rs[0]!.dev!])).flatMap((l) => l.addr_info).filter((a) => a.scope === 'link');
      assert.equal(linkLocal.length, 1, JSON.stringify(linkLocal));
      assert.ok(!linkLocal[0]!.tentative, `${rs[0]!.dev}'s link-local address is not tentative: ${JSON.stringify(linkLocal[0])}`);
    }
  });

  test('the endpoint has both addresses in the API, and IPAM holds both', async () => {
    const eps = (await agent.client.listEndpoints()) as Endpoint[];
    const ep = eps.find((e) => e.containerId === pods[0]!.id)!;
    assert.deepEqual(ep.addresses.map((a) => [a.family, a.ip]), [[4, pods[0]!.ip4], [6, pods[0]!.ip6]]);
    assert.equal(ep.state, 'ready');
    const byV6 = (await agent.client.getEndpoint(`ipv6:${pods[0]!.ip6}`)) as Endpoint;
    assert.equal(byV6.id, ep.id);
    const held = (await podAllocations(agent)).map((a) => a.split('=')[1]!);
    for (const p of pods) assert.ok(held.includes(p.ip4) && held.includes(p.ip6), held.join(' '));
  });

  test('tendril endpoint list and get show both addresses; get finds the endpoint by its IPv6 address', async () => {
    const cli = async (...args: string[]) => {
      const r = await run([TENDRIL_BIN, ...args, '--socket', agent.socket]);
      assert.equal(r.code, 0, r.stderr);
      return r.stdout;
    };
    const row = (await cli('endpoint', 'list')).split('\n').find((l) => l.includes(pods[0]!.id))!;
    assert.ok(row.includes(`${pods[0]!.ip4},${pods[0]!.ip6}`), row);
    const view = await cli('endpoint', 'get', `ipv6:${pods[0]!.ip6}`);
    assert.match(view, new RegExp(`Addresses +${pods[0]!.ip4.replaceAll('.', '\\.')}, ${pods[0]!.ip6}`));
    assert.match(await cli('endpoint', 'get', '--help'), /ipv6:<ip>/);
    // The node's IPv6 side: its pod CIDR and router in the node listing, the pods' IPv6 addresses in IPAM's.
    const nodeRow = (await cli('node', 'list')).split('\n').find((l) => l.startsWith('tdl-node-ds'))!;
    assert.ok(nodeRow.includes(`router ${router6()}`) && nodeRow.includes(POD_CIDR6), nodeRow);
    const ipamRows = (await cli('ipam', 'list')).split('\n');
    assert.ok(ipamRows.some((l) => l.startsWith(pods[0]!.ip6) && l.includes(pods[0]!.id) && l.includes(POD_CIDR6)), ipamRows.join('\n'));
    // tendril status says what is masqueraded: the eBPF datapath's IPv4 only (IPv6 masquerade is not built).
    const masq = (await cli('status')).split('\n').find((l) => l.startsWith('Masquerade'))!;
    assert.ok(masq.includes(POD_CIDR4) && !masq.includes(POD_CIDR6), masq);
    // The datapath's maps hold the IPv6 address too: the endpoint map and the ipcache (with the pod's identity).
    const ep = ((await agent.client.listEndpoints()) as Endpoint[]).find((e) => e.containerId === pods[0]!.id)!;
    const lxcRow = (await cli('bpf', 'endpoint', 'list')).split('\n').find((l) => l.includes(pods[0]!.ip6));
    assert.ok(lxcRow !== undefined && new RegExp(`\\b${ep.id}\\b`).test(lxcRow), `tendril_lxc row for ${pods[0]!.ip6}: ${lxcRow}`);
    const ipcacheRow = (await cli('bpf', 'ipcache', 'list')).split('\n').find((l) => l.includes(`${pods[0]!.ip6}/128`));
    assert.ok(ipcacheRow !== undefined && new RegExp(`\\b${ep.identity}\\b`).test(ipcacheRow), `ipcache row for ${pods[0]!.ip6}/128: ${ipcacheRow}`);
  });

  test('CHECK passes for a dual-stack pod and fails once its IPv6 default route is gone', async () => {
    await runtime.checkNetworkList(conflist('1.0.0'), rt(pods[0]!.id, pods[0]!.path));
    const p = pods[1]!;
    await runtime.checkNetworkList(conflist('1.0.0'), rt(p.id, p.path));
    const del = await pool.exec(p.ns, ['ip', '-6', 'route', 'del', 'default']);
    assert.equal(del.code, 0, del.stderr);
    await assert.rejects(runtime.checkNetworkList(conflist('1.0.0'), rt(p.id, p.path)), (e: unknown) => e instanceof CniError && /default route via fd00:242::/.test(`${e.msg} ${e.details}`));
    // Put back as the agent made it, for the tests after this one.
    const add = await pool.exec(p.ns, ['ip', '-6', 'route', 'add', 'default', 'via', router6(), 'dev', 'eth0']);
    assert.equal(add.code, 0, add.stderr);
    await runtime.checkNetworkList(conflist('1.0.0'), rt(p.id, p.path));
  });

  test('IPv4 between dual-stack pods still flows', async () => {
    assert.ok(await ping(pool, pods[0]!.ns, pods[1]!.ip4));
  });

  test('older CNI versions carry both addresses: 0.4.0 and 0.3.1 with a version each', async () => {
    const ns4 = await pool.add('v040');
    const r4 = (await runtime.addNetworkList(conflist('0.4.0'), rt('tdl-ds-040', ns4.path))) as Result040;
    assert.deepEqual(r4.ips!.map((a) => a.version).sort(), ['4', '6']);
    await runtime.delNetworkList(conflist('0.4.0'), rt('tdl-ds-040', ns4.path));
    const ns3 = await pool.add('v031');
    const r3 = (await runtime.addNetworkList(conflist('0.3.1'), rt('tdl-ds-031', ns3.path))) as Result040;
    const v6 = r3.ips!.find((a) => a.version === '6')!;
    assert.ok(inPod6(v6.address) && v6.gateway !== undefined && inPod6(v6.gateway), JSON.stringify(v6));
    assert.equal(r3.interfaces![v6.interface!]!.name, 'eth0');
    assert.ok(r3.routes!.some((x) => x.dst === '::/0' && x.gw === v6.gateway), JSON.stringify(r3.routes));
    await runtime.delNetworkList(conflist('0.3.1'), rt('tdl-ds-031', ns3.path));
  });

  test('an agent restart keeps both addresses of each pod (the endpoint and its allocations)', async () => {
    await agent.stop();
    await agent.start();
    const ep = ((await agent.client.listEndpoints()) as Endpoint[]).find((e) => e.containerId === pods[1]!.id)!;
    assert.deepEqual(ep.addresses.map((a) => a.ip), [pods[1]!.ip4, pods[1]!.ip6]);
    const held = (await podAllocations(agent)).map((a) => a.split('=')[1]!);
    for (const p of pods) assert.ok(held.includes(p.ip4) && held.includes(p.ip6), held.join(' '));
    // The state file holds both too: what a restart reads.
    const file = JSON.parse(await readFile(`${agent.stateDir}/endpoints/${ep.id}/endpoint.json`, 'utf8')) as Endpoint;
    assert.deepEqual(file.addresses.map((a) => a.family), [4, 6]);
    // The kernel side is as it was: the pod's /128 and default route, the host's route over its device.
    assert.deepEqual((await globalV6(pods[1]!.ns, 'eth0')).map((a) => a.local), [pods[1]!.ip6]);
    assert.ok((await routes6(pods[1]!.ns)).some((x) => x.dst === 'default' && x.gateway === router6()));
    assert.equal((await routes6(node, [`${pods[1]!.ip6}/128`]))[0]?.dev, ep.hostIfName);
  });

  test('an ADD whose IPv6 address cannot be had fails and keeps no IPv4 address either (the half-done allocation rolls back)', async () => {
    const before = await podAllocations(agent);
    const fillers: string[] = [];
    try {
      // Use up the IPv6 pool through the API, leaving the IPv4 one with room.
      for (let i = 0; i < 16; i++) {
        const r = await agent.client.postIpam({ family: 'ipv6', owner: `tdl-fill-${i}` }).catch((err: unknown) => err);
        if (r instanceof Error) break;
        fillers.push((r as { address: { ip: string } }).address.ip);
      }
      assert.ok(fillers.length > 0 && fillers.length < 16, `${fillers.length} IPv6 fillers`);
      const ns = await pool.add('full');
      await assert.rejects(runtime.addNetworkList(conflist('1.0.0'), rt('tdl-ds-full', ns.path)), (e: unknown) => e instanceof CniError && e.code === 100 && /fd00:242::\/125 is exhausted/.test(e.msg), 'ADD fails with tendril\'s IPAM-exhausted code, naming the IPv6 pool');
      assert.equal((await podAllocations(agent)).length, before.length + fillers.length, 'only the fillers were added');
      const held = (await podAllocations(agent)).filter((a) => a.startsWith('tdl-ds-full'));
      assert.deepEqual(held, [], 'no address of either family stays with the failed pod');
      assert.equal((await podHostLinks(pool, node)).length, 2, 'no lxc device for it');
    } finally {
      for (const ip of fillers) await agent.client.deleteIpamIp(ip);
    }
  });

  test('DEL frees both addresses and leaves no IPv6 route behind', async () => {
    assert.equal(pods.length, 2, 'the pods of the ADD test exist');
    for (const p of pods) await runtime.delNetworkList(conflist('1.0.0'), rt(p.id, p.path));
    assert.deepEqual(await podAllocations(agent), []);
    assert.deepEqual(await agent.client.listEndpoints(), []);
    const left = (await routes6(node)).filter((x) => x.dev?.startsWith('lxc'));
    assert.deepEqual(left, []);
    assert.deepEqual(await podHostLinks(pool, node), []);
  });
});
