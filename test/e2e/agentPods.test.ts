// tendril-agent and tendril-cni on one node: pods are namespaces, traffic is real.
// The agent runs in a "node" namespace; the runtime (libcni) runs here and
// executes tendril-cni, which relays to the agent over its socket.
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { CniError, CniErrorCode, type Result100 } from '../../src/cni/index.js';
import { hostInterfaceName } from '../../src/datapath/linux/links.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { type AgentProcess, ping as pingFrom, podAllocations as allocationsOf, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { NetnsProber } from '../support/reachability.js';
import { requireRoot } from '../support/root.js';

requireRoot('the agent end-to-end test');

const POD_CIDR = '10.240.0.0/24';
const pool = new NetnsPool('ag');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

function conflist(version: string, extra: Record<string, unknown> = {}): NetworkConfigList {
  return confListFromBytes(JSON.stringify({ cniVersion: version, name: 'tdlpods', plugins: [{ type: 'tendril-cni', socket: agent.socket, ...extra }] }));
}

function rt(containerId: string, netns: string, extra: Partial<RuntimeConf> = {}): RuntimeConf {
  return { containerId, netns, ifName: 'eth0', args: [['IgnoreUnknown', '1'], ['K8S_POD_NAMESPACE', 'default'], ['K8S_POD_NAME', containerId], ['SOMETHING_UNKNOWN', 'x']], ...extra };
}

const ping = (fromNs: string, ip: string) => pingFrom(pool, fromNs, ip);
const nodeLinks = () => podHostLinks(pool, node);

async function podAllocations(): Promise<string[]> {
  return (await allocationsOf(agent)).map((a) => a.split('=')[1]!);
}

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: 'tdl-node-a', args: ['--pod-cidr', POD_CIDR, '--ipam-expiration', '3000'] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

// The 20 concurrent pods (ADD, every pair talking, CHECK, DEL) run per address family in
// test/support/agentPodsSuite.ts (wrappers test/e2e/agentPodsConcurrent*.test.ts).

describe('a repeated ADD', () => {
  // The spec forbids a runtime to ADD an attachment twice without a DEL; one that does must not move the pod.
  test('of a live attachment answers with its existing result: address, MACs, labels and the service backend unchanged; another netns is refused', async (t) => {
    const ns = await pool.add('again');
    const other = await pool.add('again2');
    const prober = await NetnsProber.start('again', ns.path, { tcpPorts: [8080], udpPorts: [] });
    try {
      const t0 = performance.now();
      const first = (await runtime.addNetworkList(conflist('1.0.0'), rt('tdl-again', ns.path))) as Result100;
      const firstMs = performance.now() - t0;
      const ep = (await agent.client.getEndpoint('container-id:tdl-again')) as Endpoint;
      await agent.client.patchEndpointLabels(ep.id, { add: ['tier=kept'] });
      const labelled = (await agent.client.getEndpoint(ep.id)) as Endpoint;
      const podIp = first.ips![0]!.address.split('/')[0]!;
      await agent.client.putService(31, {
        'frontend-address': { ip: '10.96.31.1', port: 80, protocol: 'TCP' },
        'backend-addresses': [{ ip: podIp, port: 8080 }],
        flags: { type: 'ClusterIP', trafficPolicy: 'Cluster', sessionAffinity: false, sessionAffinityTimeout: 10800 },
      });
      const macBefore = (await pool.exec(ns.name, ['cat', '/sys/class/net/eth0/address'])).stdout.trim();

      const t1 = performance.now();
      const again = (await runtime.addNetworkList(conflist('1.0.0'), rt('tdl-again', ns.path))) as Result100;
      t.diagnostic(`first ADD ${firstMs.toFixed(1)} ms, repeated ADD ${(performance.now() - t1).toFixed(1)} ms (through tendril-cni)`);
      assert.deepEqual(again.ips, first.ips, 'same address');
      assert.deepEqual(again.interfaces, first.interfaces, 'same interfaces and MACs');
      assert.equal((await pool.exec(ns.name, ['cat', '/sys/class/net/eth0/address'])).stdout.trim(), macBefore, 'the pod\'s eth0 is the same');
      const after = (await agent.client.getEndpoint('container-id:tdl-again')) as Endpoint;
      assert.equal(after.id, ep.id, 'same endpoint');
      assert.deepEqual(after.labels, labelled.labels, 'labels set since the first ADD are kept');
      assert.ok(after.labels.some((l) => l.endsWith('tier=kept')), JSON.stringify(after.labels));
      assert.deepEqual((await podAllocations()).filter((a) => a === podIp), [podIp], 'one address');
      // The service's only backend is the pod's address: a connection to the frontend from the node still reaches it.
      const svc = await agent.client.getService(31);
      assert.deepEqual(svc['backend-addresses'].map((b) => b.ip), [podIp]);
      const nodeProber = await NetnsProber.start('againnode', `/var/run/netns/${node}`, { tcpPorts: [], udpPorts: [] });
      try {
        assert.equal((await nodeProber.probe({ proto: 'tcp', dst: '10.96.31.1', port: 80, timeoutMs: 2000 })).outcome, 'open');
        assert.equal((await nodeProber.probe({ proto: 'tcp', dst: podIp, port: 8080, timeoutMs: 2000 })).outcome, 'open');
      } finally {
        await nodeProber.stop();
      }

      // Same container and interface in another namespace while the first is live: refused with code 4, nothing moves.
      await assert.rejects(runtime.addNetworkList(conflist('1.0.0'), rt('tdl-again', other.path)), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.InvalidEnvironmentVariables && /already attached .*DEL it first/.test(e.message));
      assert.equal(((await agent.client.getEndpoint('container-id:tdl-again')) as Endpoint).id, ep.id);
      assert.ok(await ping(node, podIp), 'the pod still answers at its address');

    } finally {
      await agent.client.deleteService(31).catch(() => undefined);
      await runtime.delNetworkList(conflist('1.0.0'), rt('tdl-again', ns.path));
      await prober.stop();
    }
  });
});

describe('results in every supported version', () => {
  for (const version of ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']) {
    test(`cniVersion ${version}`, async () => {
      const ns = await pool.add(`v${version.replace(/\./g, '')}`);
      const id = `tdl-ver-${version.replace(/\./g, '')}`;
      const r = (await runtime.addNetworkList(conflist(version), rt(id, ns.path))) as { cniVersion: string; ips: Array<{ version?: string }> };
      assert.equal(r.cniVersion, version);
      assert.equal(r.ips[0]!.version, version.startsWith('0.') ? '4' : undefined);
      await runtime.delNetworkList(conflist(version), rt(id, ns.path));
    });
  }
  test('0.2.0 is refused with code 1', async () => {
    const ns = await pool.add('v020');
    await assert.rejects(runtime.addNetworkList(conflist('0.2.0'), rt('tdl-v020', ns.path)), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.IncompatibleVersion);
  });
});

describe('bad input changes nothing', () => {
  const cases: Array<[string, Partial<RuntimeConf>, Record<string, unknown>, number]> = [
    ['an interface name too long', { ifName: 'eth0123456789abc' }, {}, 4],
    ['an interface name with a path character', { ifName: 'e/th0' }, {}, 4],
    ['a bad label', { args: [['TENDRIL_LABELS', 'bad key=x']] }, {}, 7],
    ['a socket path that is not absolute', {}, { socket: 'relative.sock' }, 7],
  ];
  for (const [k, [name, patch, extra, code]] of cases.entries()) {
    test(`${name} → code ${code}`, async () => {
      const ns = await pool.add(`bad${k}`);
      const before = await podAllocations();
      await assert.rejects(runtime.addNetworkList(conflist('1.0.0', extra), rt(`tdl-bad-${k}`, ns.path, patch)), (e: unknown) => {
        assert.ok(e instanceof CniError, String(e));
        assert.equal(e.code, code, e.message);
        return true;
      });
      assert.deepEqual(await podAllocations(), before);
      assert.deepEqual(await nodeLinks(), []);
    });
  }

  test('a netns that does not exist fails ADD and rolls back the allocation', async () => {
    await assert.rejects(runtime.addNetworkList(conflist('1.0.0'), rt('tdl-nons', '/var/run/netns/tdl-does-not-exist')), (e: unknown) => e instanceof CniError && e.code === 102);
    assert.deepEqual(await podAllocations(), []);
    assert.deepEqual(await nodeLinks(), []);
  });

  test('DEL of an unknown container succeeds; CHECK of one is code 3', async () => {
    const ns = await pool.add('unknown');
    await runtime.delNetworkList(conflist('1.0.0'), rt('tdl-never-added', ns.path));
    await runtime.addNetworkList(conflist('1.0.0'), rt('tdl-cache-only', ns.path));
    // Remove the endpoint behind the runtime's back: its cached result now names a container the agent does not know.
    await agent.client.request('DELETE', '/endpoint/container-id:tdl-cache-only');
    await assert.rejects(runtime.checkNetworkList(conflist('1.0.0'), rt('tdl-cache-only', ns.path)), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.UnknownContainer);
    await runtime.delNetworkList(conflist('1.0.0'), rt('tdl-cache-only', ns.path));
  });

  test('the API answers 4xx with a code and a message', async () => {
    await assert.rejects(agent.client.request('POST', '/cni', { command: 'ADD' }), /required property 'config'/);
    await assert.rejects(agent.client.request('GET', '/endpoint/nonsense'), /invalid endpoint ID/);
    await assert.rejects(agent.client.request('GET', '/endpoint/4242'), /not found/);
    await assert.rejects(agent.client.request('DELETE', '/ipam/not-an-ip'), /not an IP address/);
  });
});

describe('replacing what is in the way', () => {
  test('an interface already named eth0 in the pod that is not the attachment\'s own: ADD is refused "already exists" and nothing changes', async () => {
    const ns = await pool.add('stale');
    const made = await pool.exec(ns.name, ['ip', 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'tdlstale1']);
    assert.equal(made.code, 0, made.stderr);
    const before = (await pool.exec(ns.name, ['ip', '-o', 'link', 'show'])).stdout;
    await assert.rejects(runtime.addNetworkList(conflist('1.0.0'), rt('tdl-stale', ns.path)), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.InvalidEnvironmentVariables && /eth0 already exists/.test(e.message));
    assert.equal((await pool.exec(ns.name, ['ip', '-o', 'link', 'show'])).stdout, before, 'the pod\'s interfaces are as they were');
    assert.deepEqual(await nodeLinks(), [], 'no host end left');
    assert.deepEqual(await podAllocations(), [], 'no address left');
    await runtime.delNetworkList(conflist('1.0.0'), rt('tdl-stale', ns.path));
    assert.equal((await pool.exec(ns.name, ['ip', '-o', 'link', 'show'])).stdout, before, 'DEL leaves them alone too');
  });

  test('an interrupted ADD\'s veth pair (the attachment\'s own lxc name, eth0 its peer) is replaced by the pod\'s veth', async () => {
    const ns = await pool.add('interrupted');
    const hostIf = hostInterfaceName('tdl-interrupted', 'eth0');
    const made = await pool.exec(node, ['ip', 'link', 'add', hostIf, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns.name]);
    assert.equal(made.code, 0, made.stderr);
    const r = (await runtime.addNetworkList(conflist('1.0.0'), rt('tdl-interrupted', ns.path))) as Result100;
    assert.ok(await ping(ns.name, '10.240.0.1'), 'the new eth0 works');
    assert.ok(r.ips![0]!.address.endsWith('/32'));
    await runtime.delNetworkList(conflist('1.0.0'), rt('tdl-interrupted', ns.path));
  });
});

describe('given addresses', () => {
  test('CNI_ARGS IP= gives the pod exactly that address; a second pod asking for it gets a conflict', async () => {
    const first = await pool.add('ipa');
    const second = await pool.add('ipb');
    const r = (await runtime.addNetworkList(conflist('1.0.0'), rt('tdl-ip-a', first.path, { args: [['IP', '10.240.0.200']] }))) as Result100;
    assert.equal(r.ips![0]!.address, '10.240.0.200/32');
    await assert.rejects(runtime.addNetworkList(conflist('1.0.0'), rt('tdl-ip-b', second.path, { args: [['IP', '10.240.0.200']] })), (e: unknown) => e instanceof CniError && /already allocated/.test(e.message));
    assert.deepEqual(await nodeLinks(), [(await agent.client.getEndpoint('container-id:tdl-ip-a') as Endpoint).hostIfName], 'the failed ADD left nothing');
    await runtime.delNetworkList(conflist('1.0.0'), rt('tdl-ip-a', first.path));
  });

  test('POST /ipam/{ip} allocates that address, 409 when taken; DELETE /ipam/{ip} frees it', async () => {
    const res = await agent.client.request<{ address: { ip: string } }>('POST', '/ipam/10.240.0.201?owner=tdl-manual');
    assert.equal(res.address.ip, '10.240.0.201');
    await assert.rejects(agent.client.request('POST', '/ipam/10.240.0.201?owner=tdl-other'), (e: unknown) => (e as { status?: number }).status === 409);
    await assert.rejects(agent.client.request('POST', '/ipam/192.0.2.7?owner=tdl-other'), (e: unknown) => (e as { status?: number }).status === 400);
    await agent.client.request('DELETE', '/ipam/10.240.0.201');
    assert.deepEqual(await podAllocations(), []);
  });
});

describe('the granular API (Cilium\'s plugin-driven flow)', () => {
  test('POST /ipam, a veth made by hand, PUT /endpoint: the pod is an endpoint with an identity and talks; DELETE cleans up', async () => {
    const pod = await pool.add('adopt');
    const owner = 'tdl-adopt';
    const alloc = await agent.client.request<{ address: { ip: string; gateway: string } }>('POST', `/ipam?owner=${owner}&family=ipv4`, undefined, { expiration: 'true' });
    const { ip, gateway } = alloc.address;
    const inNode = (argv: string[]) => pool.exec(node, argv);
    const inPod = (argv: string[]) => pool.exec(pod.name, argv);
    for (const r of [
      await inNode(['ip', 'link', 'add', 'tdladopt0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.path]),
      await inPod(['ip', 'link', 'set', 'eth0', 'up']),
      await inPod(['ip', 'addr', 'add', `${ip}/32`, 'dev', 'eth0']),
      await inPod(['ip', 'route', 'add', `${gateway}/32`, 'dev', 'eth0', 'scope', 'link']),
      await inPod(['ip', 'route', 'add', 'default', 'via', gateway, 'dev', 'eth0']),
    ]) {
      assert.equal(r.code, 0, r.stderr);
    }
    const body = { containerId: owner, ifName: 'eth0', netns: pod.path, hostIfName: 'tdladopt0', addresses: [ip], labels: ['app=adopted'] };
    await assert.rejects(agent.client.request('PUT', `/endpoint/container-id:${owner}`, { ...body, addresses: ['10.240.0.250'] }), /not allocated/);
    const ep = await agent.client.request<Endpoint>('PUT', `/endpoint/container-id:${owner}`, body);
    assert.equal(ep.state, 'ready');
    assert.ok(ep.identity! >= 256);
    await assert.rejects(agent.client.request('PUT', `/endpoint/container-id:${owner}`, body), (e: unknown) => (e as { status?: number }).status === 409);
    assert.ok(await ping(pod.name, gateway), 'the adopted pod reaches its gateway');
    assert.ok(await ping(node, ip), 'the node reaches the adopted pod');
    const alloced = (await agent.client.listIpam()).allocations.find((a) => a.ip === ip);
    assert.equal(alloced?.expiresAt, undefined, 'the provisional address was confirmed');
    await agent.client.request('DELETE', `/endpoint/${ep.id}`);
    assert.deepEqual(await podAllocations(), []);
    // The veth pair is its creator's: the endpoint's host route goes, the interface stays.
    assert.equal((await inNode(['ip', 'route', 'show', `${ip}/32`])).stdout, '', 'the host route went with the endpoint');
    assert.equal((await inNode(['ip', 'link', 'show', 'tdladopt0'])).code, 0, 'the adopted interface stays');
    assert.equal((await inNode(['ip', 'link', 'del', 'tdladopt0'])).code, 0);
  });
});

describe('STATUS and GC (1.1.0)', () => {
  test('STATUS succeeds while the agent runs', async () => {
    await runtime.getStatusNetworkList(conflist('1.1.0'));
  });

  test('GC removes endpoints and addresses not among the valid attachments', async () => {
    const keep = await pool.add('gckeep');
    const drop = await pool.add('gcdrop');
    await runtime.addNetworkList(conflist('1.1.0'), rt('tdl-gc-keep', keep.path));
    await runtime.addNetworkList(conflist('1.1.0'), rt('tdl-gc-drop', drop.path));
    await runtime.gcNetworkList(conflist('1.1.0'), { validAttachments: [{ containerID: 'tdl-gc-keep', ifname: 'eth0' }] });
    const eps = (await agent.client.listEndpoints()) as Endpoint[];
    assert.deepEqual(eps.map((e) => e.containerId), ['tdl-gc-keep']);
    assert.equal((await podAllocations()).length, 1);
    assert.equal((await nodeLinks()).length, 1);
    await runtime.delNetworkList(conflist('1.1.0'), rt('tdl-gc-keep', keep.path));
  });
});

describe('state files', () => {
  test('the API socket is 0600 and owned by root', async () => {
    const r = await pool.exec(node, ['stat', '-c', '%a %U', agent.socket]);
    assert.equal(r.stdout.trim(), '600 root');
  });
  test('no endpoint state is left after all pods are gone', async () => {
    assert.deepEqual(await readdir(join(agent.stateDir, 'endpoints')), []);
  });
});
