// The operator reads TendrilNodes and TendrilEndpoints through the agents'
// own codecs: what no agent would use counts for nothing in its GC and pools.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { tendrilEndpointObject } from '../k8s/tendrilEndpoint.js';
import { tendrilNodeObject } from '../k8s/tendrilNode.js';
import type { NodeRecord } from '../node/types.js';
import { readTendrilEndpoint, readTendrilNode } from './tendrilObjectViews.js';

const ep = { id: 7, podNamespace: 'shop', podName: 'web-1', podUid: 'u-1', identity: 300, addresses: ['10.0.1.7'] };
const self = { name: 'node-a', nodeIP: '192.168.0.1' };

test('an endpoint an agent wrote: its node, identity and owner pod; one an agent would refuse: no node, no identity', () => {
  const obj = { ...tendrilEndpointObject(ep, self), metadata: { ...tendrilEndpointObject(ep, self).metadata, uid: 'e-1', resourceVersion: '5' } };
  assert.deepEqual(readTendrilEndpoint(obj), { namespace: 'shop', name: 'web-1', uid: 'e-1', resourceVersion: '5', node: 'node-a', identity: 300, ownerPod: { name: 'web-1', uid: 'u-1' } });
  for (const spec of [
    { ...obj.spec, addresses: ['not-an-ip'] },
    { ...obj.spec, identity: 1 }, // the host's: never a pod's elsewhere
    { ...obj.spec, nodeIP: '' },
  ]) {
    const v = readTendrilEndpoint({ ...obj, spec } as typeof obj);
    assert.equal(v?.identity, undefined, JSON.stringify(spec));
    assert.equal(v?.node, '', JSON.stringify(spec));
    assert.deepEqual(v?.ownerPod, { name: 'web-1', uid: 'u-1' }, 'still judged by its pod');
  }
  const unowned = readTendrilEndpoint({ ...obj, metadata: { name: 'web-1', namespace: 'shop' } });
  assert.equal(unowned?.ownerPod, undefined);
});

test("a node's spec.ipam: canonical CIDRs when handed out; absent when unset, empty or not CIDRs", () => {
  const record: NodeRecord = { name: 'node-a', addresses: [{ type: 'InternalIP', ip: '192.168.0.1' }], podCidrs: [], routingMode: 'native', health: { status: 'ok' }, startedAt: '2026-11-29T10:00:00.000Z' };
  const obj = tendrilNodeObject(record);
  const withIpam = (podCIDRs: unknown) => ({ ...obj, spec: { ...obj.spec, ipam: { podCIDRs } } });
  assert.deepEqual(readTendrilNode(withIpam(['10.200.1.0/24', 'fd00:0200:0001::/64']))?.ipamPodCIDRs, ['10.200.1.0/24', 'fd00:200:1::/64']);
  assert.equal(readTendrilNode(obj)?.ipamPodCIDRs, undefined);
  assert.equal(readTendrilNode(withIpam([]))?.ipamPodCIDRs, undefined);
  // Host bits set, or not a CIDR: no agent could use it, so the operator hands the node CIDRs afresh.
  assert.equal(readTendrilNode(withIpam(['10.200.1.7/24']))?.ipamPodCIDRs, undefined);
  assert.equal(readTendrilNode(withIpam(['x']))?.ipamPodCIDRs, undefined);
});
