import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type OwnNodeFacts, ownNodeRecord } from './ownNode.js';

describe('ownNodeRecord', () => {
  const facts: OwnNodeFacts = {
    nodeIp: '192.0.2.1',
    otherAddresses: [],
    routerAddresses: ['10.1.0.1', 'fd00:1::1'],
    podCidrs: ['10.1.0.0/24', 'fd00:1::/64'],
    routingMode: 'native',
    kvstore: { backend: 'etcd', connected: true, revision: 1, detail: '' },
    startedAt: new Date(0),
  };

  it('a dual-stack underlay: the IPv6 address is the second InternalIP (other nodes\' next hop to this node\'s IPv6 pods)', () => {
    const r = ownNodeRecord('a', { ...facts, nodeIp6: '2001:db8::1' });
    assert.deepEqual(r.addresses, [
      { type: 'InternalIP', ip: '192.0.2.1' },
      { type: 'InternalIP', ip: '2001:db8::1' },
      { type: 'RouterIP', ip: '10.1.0.1' },
      { type: 'RouterIP', ip: 'fd00:1::1' },
    ]);
  });

  it('the IPv6 address once, when the Node object lists it too', () => {
    const r = ownNodeRecord('a', { ...facts, nodeIp6: '2001:db8::1', otherAddresses: [{ type: 'InternalIP', ip: '2001:db8::1' }] });
    assert.deepEqual(r.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.ip), ['192.0.2.1', '2001:db8::1']);
    assert.deepEqual(ownNodeRecord('a', facts).addresses.filter((a) => a.type === 'InternalIP').map((a) => a.ip), ['192.0.2.1']);
  });
});
