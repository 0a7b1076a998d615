// The agent going away — cleanly, during DEL, or killed in the middle of ADD —
// must neither drop pod traffic nor leak addresses, links or endpoints.
import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Endpoint } from '../../src/endpoint/endpoint.js';
import { CniError, CniErrorCode, type Result100 } from '../../src/cni/index.js';
import { type CniRuntime, confListFromBytes, type NetworkConfigList, type RuntimeConf } from '../../src/libcni/index.js';
import { type AgentProcess, ping as pingFrom, podAllocations as allocationsOf, podHostLinks, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';

requireRoot('the agent restart test');

const EXPIRATION_MS = 2000;
const pool = new NetnsPool('rs');
let node = '';
let agent: AgentProcess;
let runtime: CniRuntime;
let cleanup = async () => {};

function conflist(version = '1.1.0'): NetworkConfigList {
  return confListFromBytes(JSON.stringify({ cniVersion: version, name: 'tdlrestart', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
}
const rt = (containerId: string, netns: string): RuntimeConf => ({ containerId, netns, ifName: 'eth0', args: [['TENDRIL_LABELS', 'app=restart']] });

const ping = (fromNs: string, ip: string) => pingFrom(pool, fromNs, ip);
const nodeLinks = () => podHostLinks(pool, node);
const podAllocations = () => allocationsOf(agent);

const ipOf = (r: Result100) => r.ips![0]!.address.split('/')[0]!;

before(async () => {
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, {
    nodeName: 'tdl-node-r',
    args: ['--pod-cidr', '10.241.0.0/24', '--ipam-expiration', String(EXPIRATION_MS)],
  }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
});

describe('agent restart between ADD and DEL', () => {
  test('pods keep talking while the agent is down; after restart the endpoints are the same and DEL works', async () => {
    const a = await pool.add('a');
    const b = await pool.add('b');
    const ra = (await runtime.addNetworkList(conflist(), rt('tdl-rs-a', a.path))) as Result100;
    const rb = (await runtime.addNetworkList(conflist(), rt('tdl-rs-b', b.path))) as Result100;
    const before = (await agent.client.listEndpoints()) as Endpoint[];

    await agent.stop();
    assert.ok(await ping(a.name, ipOf(rb)), 'a reaches b while the agent is down');
    assert.ok(await ping(b.name, ipOf(ra)), 'b reaches a while the agent is down');
    // While it is down: ADD is "try again later", STATUS is "not available".
    const c = await pool.add('c');
    await assert.rejects(runtime.addNetworkList(conflist(), rt('tdl-rs-c', c.path)), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.TryAgainLater);
    await assert.rejects(runtime.getStatusNetworkList(conflist()), (e: unknown) => e instanceof CniError && e.code === CniErrorCode.PluginNotAvailable);

    await agent.start();
    const restored = (await agent.client.listEndpoints()) as Endpoint[];
    assert.deepEqual(
      restored.map((e) => [e.id, e.containerId, e.addresses.map((x) => x.ip), e.hostIfName, e.identity]),
      before.map((e) => [e.id, e.containerId, e.addresses.map((x) => x.ip), e.hostIfName, e.identity]),
    );
    assert.ok(await ping(a.name, ipOf(rb)));
    // Long after the expiration: the restored addresses were confirmed, not expired.
    await new Promise((r) => setTimeout(r, EXPIRATION_MS + 1000));
    assert.equal((await podAllocations()).length, 2);
    await runtime.delNetworkList(conflist(), rt('tdl-rs-a', a.path));
    await runtime.delNetworkList(conflist(), rt('tdl-rs-b', b.path));
    assert.deepEqual(await podAllocations(), []);
    assert.deepEqual(await nodeLinks(), []);
  });
});

describe('agent down during DEL', () => {
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

describe('agent killed in the middle of ADD', () => {
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
