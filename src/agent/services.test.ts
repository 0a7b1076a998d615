// The agent's service wiring over the fake datapath: services persist across
// a restart with their backend IDs, and Local services follow the node's endpoints.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { Result100 } from '../cni/index.js';
import { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
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
});
