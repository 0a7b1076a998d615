// Against a real agent and kernel: PUT /endpoint adopts only
// a veth whose peer is the named interface in the named pod namespace. The
// node's uplink, tendril_host and another pod's veth are refused with 400 and
// nothing changes (no proxy ARP, no route, no link deleted); DELETE of an
// adopted endpoint removes its host routes and leaves the veth pair, which
// tendril did not create. The router address can be neither freed nor taken.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { Result100 } from '../../src/cni/index.js';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { type AgentProcess, ping, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the API hardening end-to-end test');

const POD_CIDR = '10.246.0.0/24';
const ROUTER = '10.246.0.1';
const pool = new NetnsPool('hapi');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

const conflist = (): NetworkConfigList => confListFromBytes(JSON.stringify({ cniVersion: '1.1.0', name: 'tdlhapi', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
const rt = (containerId: string, netns: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', containerId]] });

async function inNode(argv: string[]): Promise<string> {
  const r = await pool.exec(node, argv);
  assert.equal(r.code, 0, `${argv.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

/** Everything a refused adoption could have changed in the node's namespace. */
async function nodeSnapshot(): Promise<Record<string, unknown>> {
  const links = JSON.parse(await inNode(['ip', '-j', 'link', 'show'])) as Array<{ ifindex: number; ifname: string; flags: string[] }>;
  // IPv6 link-local addresses appear by themselves (autoconf finishing on a new link): not the API's doing.
  const routes = (JSON.parse(await inNode(['ip', '-j', 'route', 'show', 'table', 'all'])) as Array<{ dst: string }>).filter((r) => !r.dst.startsWith('fe80:'));
  const proxyArp: Record<string, string> = {};
  for (const l of links) proxyArp[l.ifname] = (await inNode(['cat', `/proc/sys/net/ipv4/conf/${l.ifname}/proxy_arp`])).trim();
  return { links: links.map((l) => `${l.ifindex} ${l.ifname} ${l.flags.join(',')}`).sort(), routes: routes.map((r) => JSON.stringify(r)).sort(), proxyArp };
}

const status = (e: unknown): number | undefined => (e as { status?: number }).status;

async function allocate(owner: string): Promise<string> {
  const r = await agent.client.request<{ address: { ip: string } }>('POST', `/ipam?owner=${owner}&family=ipv4`);
  return r.address.ip;
}

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-hapi', args: ['--pod-cidr', POD_CIDR] }));
  // The node's uplink: eth0, with an address and a route, its other end in a namespace standing for the network.
  const world = await pool.add('world');
  await inNode(['ip', 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'up0', 'netns', world.path]);
  await inNode(['ip', 'addr', 'add', '192.0.2.10/24', 'dev', 'eth0']);
  await inNode(['ip', 'link', 'set', 'eth0', 'up']);
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

describe('PUT /endpoint refuses interfaces that are not the pod\'s veth', () => {
  test('the node\'s uplink, tendril_host and another pod\'s veth are 400; nothing in the node changes and the other pod keeps talking', async () => {
    const pod = await pool.add('pod');
    const other = await pool.add('other');
    const result = (await runtime.addNetworkList(conflist(), rt('tdl-hapi-other', other.path))) as Result100;
    const otherIp = result.ips![0]!.address.split('/')[0]!;
    const otherHostIf = ((await agent.client.getEndpoint('container-id:tdl-hapi-other')) as Endpoint).hostIfName;
    const ip = await allocate('tdl-hapi-pod');
    const before = await nodeSnapshot();
    assert.equal((before.proxyArp as Record<string, string>).eth0, '0');
    for (const hostIfName of ['eth0', 'tendril_host', otherHostIf, 'tdlnosuch0']) {
      const body = { containerId: 'tdl-hapi-pod', ifName: 'eth0', netns: pod.path, hostIfName, addresses: [ip] };
      await assert.rejects(agent.client.request('PUT', '/endpoint/container-id:tdl-hapi-pod', body), (e: unknown) => {
        assert.equal(status(e), 400, `${hostIfName}: ${String(e)}`);
        assert.match(String((e as Error).message), new RegExp(hostIfName));
        return true;
      });
      assert.deepEqual(await nodeSnapshot(), before, `PUT /endpoint with ${hostIfName} changed nothing in the node`);
    }
    await assert.rejects(agent.client.request('DELETE', '/endpoint/container-id:tdl-hapi-pod'), (e: unknown) => status(e) === 404);
    assert.ok(await ping(pool, node, '192.0.2.10'), 'the uplink still has its address');
    assert.ok(await ping(pool, other.name, ROUTER), 'the other pod still reaches its gateway');
    assert.ok(await ping(pool, node, otherIp), 'the node still reaches the other pod');
    await agent.client.request('DELETE', `/ipam/${ip}`);
    await runtime.delNetworkList(conflist(), rt('tdl-hapi-other', other.path));
  });

  test('an adopted endpoint\'s DELETE removes its host routes and leaves the veth pair', async () => {
    const pod = await pool.add('adopt');
    const ip = await allocate('tdl-hapi-adopt');
    await inNode(['ip', 'link', 'add', 'tdlhapia0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.path]);
    const ep = await agent.client.request<Endpoint>('PUT', '/endpoint/container-id:tdl-hapi-adopt', { containerId: 'tdl-hapi-adopt', ifName: 'eth0', netns: pod.path, hostIfName: 'tdlhapia0', addresses: [ip] });
    assert.equal(ep.state, 'ready');
    assert.match(await inNode(['ip', 'route', 'show', `${ip}/32`]), /dev tdlhapia0/);
    await agent.client.request('DELETE', `/endpoint/${ep.id}`);
    assert.equal(await inNode(['ip', 'route', 'show', `${ip}/32`]), '', 'the host route went');
    assert.match(await inNode(['ip', 'link', 'show', 'tdlhapia0']), /tdlhapia0/, 'the adopted interface stays');
    assert.equal((await pool.exec(pod.name, ['ip', 'link', 'show', 'eth0'])).code, 0, 'its pod end stays');
    await inNode(['ip', 'link', 'del', 'tdlhapia0']);
  });
});

describe('the router address', () => {
  test('DELETE /ipam/<router> and POST /ipam/<router> are 409; the router keeps its address and pods their gateway', async () => {
    await assert.rejects(agent.client.request('DELETE', `/ipam/${ROUTER}`), (e: unknown) => status(e) === 409 && /router/.test(String((e as Error).message)));
    await assert.rejects(agent.client.request('POST', `/ipam/${ROUTER}?owner=tdl-thief`), (e: unknown) => status(e) === 409 && /router/.test(String((e as Error).message)));
    const router = (await agent.client.listIpam()).allocations.find((a) => a.ip === ROUTER);
    assert.match(router?.owner ?? '', /^tendril:router:/);
  });
});
