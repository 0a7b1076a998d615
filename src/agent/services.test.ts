// The agent's service wiring over the fake datapath: services persist across
// a restart with their backend IDs, Local services follow the node's endpoints, and
// a NodePort on :: follows the node's IPv6 addresses.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, it } from 'node:test';
import type { Result100 } from '../cni/index.js';
import { eventually } from '../../test/support/datapathObserve.js';
import { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
import { CNI_BIN_DIR } from '../ipam/testing/subjects.js';
import type { ServiceSpec } from '../service/types.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlsvc', type: 'tendril-cni' });

describe('agent services', () => {
  let node: FakeNodeAgent | undefined;
  afterEach(async () => {
    await node?.stop();
    node = undefined;
  });

  async function addPod(n: FakeNodeAgent, containerId: string): Promise<string> {
    const netns = `/var/run/netns/tdlsvc-${containerId}`;
    n.datapath.addNetns(netns);
    const { result } = (await n.agent.api().cni.handle({ command: 'ADD', containerId, netns, ifName: 'eth0', args: '', config: CONF })) as { result?: Result100 };
    return result!.ips![0]!.address.split('/')[0]!;
  }

  it('serves no services over a datapath without load-balancing maps', async () => {
    node = await startFakeNodeAgent({ nodeName: 'tdl-svc-none', podCidr: '10.88.0.0/24' });
    assert.equal(node.agent.api().services, undefined);
  });

  it('keeps services and backend IDs across a restart, and Local services follow endpoints', async () => {
    const datapath = new FakeDatapath({ nodeLinks: ['eth0'], loadBalancer: true });
    node = await startFakeNodeAgent({ nodeName: 'tdl-svc-unit', podCidr: '10.88.1.0/24', datapath });
    const lb = datapath.loadBalancer!;
    assert.deepEqual(lb.restored, { services: [], backends: [] }, 'restoreDone ran at start');
    const services = node.agent.api().services!;
    const podIp = await addPod(node, 'tdlsvcpod1');
    const spec: ServiceSpec = {
      'frontend-address': { ip: '0.0.0.0', port: 30080, protocol: 'TCP' },
      'backend-addresses': [{ ip: podIp, port: 8080 }, { ip: '10.99.0.5', port: 8080 }],
      flags: { type: 'NodePort', trafficPolicy: 'Local' },
    };
    const r = await services.upsert(5, spec);
    const [localId, remoteId] = r.service['backend-addresses'].map((b) => b.id);
    assert.deepEqual(r.service['backend-addresses'].map((b) => b.local), [true, false]);
    assert.deepEqual(lb.services.get(5)!.backendIds, [localId]);
    assert.deepEqual(lb.services.get(5)!.internalBackendIds, [localId, remoteId]);

    // A second pod whose address is a backend: it becomes local once its endpoint exists.
    await services.upsert(5, { ...spec, 'backend-addresses': [...spec['backend-addresses'], { ip: '10.88.1.3', port: 8080 }] });
    const thirdId = services.get(5)!['backend-addresses'][2]!.id;
    const second = await addPod(node, 'tdlsvcpod2');
    assert.equal(second, '10.88.1.3', 'IPAM hands out addresses in order');
    await services.upsert(6, { 'frontend-address': { ip: '10.96.0.6', port: 53, protocol: 'UDP' }, 'backend-addresses': [{ ip: podIp, port: 53 }], flags: { type: 'ClusterIP' } });
    assert.deepEqual(lb.services.get(5)!.backendIds, [localId, thirdId]);

    await node.agent.api().cni.handle({ command: 'DEL', containerId: 'tdlsvcpod2', netns: '/var/run/netns/tdlsvc-tdlsvcpod2', ifName: 'eth0', args: '', config: CONF });
    await services.upsert(6, { 'frontend-address': { ip: '10.96.0.6', port: 53, protocol: 'UDP' }, 'backend-addresses': [{ ip: podIp, port: 53 }], flags: { type: 'ClusterIP' } });
    assert.deepEqual(lb.services.get(5)!.backendIds, [localId]);

    const before = services.list();
    node = await node.restart();
    assert.deepEqual(node.agent.api().services!.list(), before);
    assert.deepEqual(lb.restored!.services.sort(), [5, 6]);
    assert.deepEqual(lb.services.get(5)!.backendIds, [localId]);
  });

  it('serves a NodePort on :: on the node\'s IPv6 addresses under IDs kept across a restart', async () => {
    const datapath = new FakeDatapath({ nodeLinks: ['eth0'], loadBalancer: true });
    node = await startFakeNodeAgent({ nodeName: 'tdl-svc-any6', podCidr: '10.88.2.0/24', datapath, config: { podCidrs: ['10.88.2.0/24', 'fd00:88:2::/64'] } });
    const lb = datapath.loadBalancer!;
    const spec: ServiceSpec = { 'frontend-address': { ip: '::', port: 30090, protocol: 'TCP' }, 'backend-addresses': [{ ip: 'fd00:99::5', port: 8080 }], flags: { type: 'NodePort' } };
    const r = await node.agent.api().services!.upsert(7, spec);
    assert.equal(r.service['frontend-address'].ip, '::');
    // The fake node's IPv6 address is its IPv6 router address (no interfaces): one frontend there, under the service's ID.
    const held = () => [...lb.services.values()].filter((e) => e.port === 30090).map((e) => [e.address, e.id]);
    assert.deepEqual(held(), [['fd00:88:2::1', 7]]);
    node = await node.restart();
    assert.deepEqual(node.agent.api().services!.get(7)!['frontend-address'].ip, '::');
    assert.deepEqual(held(), [['fd00:88:2::1', 7]]);
    assert.ok(lb.restored!.services.includes(7));
  });

  it('extends a NodePort on :: to an IPv6 gateway the node takes while running (delegated IPAM)', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'tdl-svc-deleg-'));
    try {
      const datapath = new FakeDatapath({ nodeLinks: ['eth0'], loadBalancer: true });
      node = await startFakeNodeAgent({ nodeName: 'tdl-svc-deleg', podCidr: '10.0.0.0/24', datapath, config: { ipam: 'delegated', podCidrs: [], cniPath: [CNI_BIN_DIR] } });
      const lb = datapath.loadBalancer!;
      const services = node.agent.api().services!;
      const add = async (containerId: string, subnet: string, gateway: string) => {
        const netns = `/var/run/netns/tdlsvc-${containerId}`;
        node!.datapath.addNetns(netns);
        const config = JSON.stringify({ cniVersion: '1.0.0', name: `tdl${containerId}`, type: 'tendril-cni', ipam: { type: 'host-local', dataDir, ranges: [[{ subnet, gateway }]] } });
        await node!.agent.api().cni.handle({ command: 'ADD', containerId, netns, ifName: 'eth0', args: '', config });
      };
      const spec: ServiceSpec = { 'frontend-address': { ip: '::', port: 30091, protocol: 'TCP' }, 'backend-addresses': [{ ip: 'fd00:99::5', port: 8080 }], flags: { type: 'NodePort' } };
      await assert.rejects(services.upsert(8, spec), /it has none/, 'no IPv6 node address yet');
      await add('tdlsvcd1', 'fd00:63::/120', 'fd00:63::1');
      await services.upsert(8, spec);
      const held = () => [...lb.services.values()].filter((e) => e.port === 30091).map((e) => [e.address, e.id]);
      assert.deepEqual(held(), [['fd00:63::1', 8]]);
      // The second ADD fails after its gateway is on the host device: no endpoint comes, the node address stays.
      node.datapath.failNext('addPod');
      await assert.rejects(add('tdlsvcd2', 'fd00:64::/120', 'fd00:64::1'));
      assert.ok(node.datapath.node().routerAddresses.includes('fd00:64::1'));
      // The gateway is a node address from then on: the service follows without a write.
      await eventually(async () => held().length === 2, 3000, 'the NodePort on :: on the new gateway');
      assert.deepEqual(held(), [['fd00:63::1', 8], ['fd00:64::1', 32767]]);
      assert.equal(services.get(8)!['frontend-address'].ip, '::');
    } finally {
      await node?.stop();
      node = undefined;
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
