import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NodeConfigError } from '../node/index.js';
import { defaultConfig, validateConfig } from './config.js';
import { nodeBasics } from './nodeBasics.js';

// nodeBasics with the underlay given (what detectUnderlay found, underlay.test.ts): the node IP, its second
// InternalIP, the pod MTU by underlay family (the overlay's outer header is the node IP's family).
describe('nodeBasics', () => {
  const config = (extra: Record<string, unknown>) => validateConfig({ ...defaultConfig(), podCidrs: ['10.0.0.0/24', 'fd00:10::/64'], ...extra });
  const dual = { device: 'eth0', ifindex: 2, mtu: 1500, ip: '192.0.2.1', ip6: '2001:db8::1' };
  const v6only = { device: 'eth0', ifindex: 2, mtu: 1500, ip: '2001:db8::1' };

  it('a dual-stack underlay: the IPv4 node IP, the IPv6 address as second InternalIP; tunnel mode takes 50 bytes', async () => {
    assert.deepEqual(await nodeBasics(config({ routingMode: 'tunnel' }), { underlay: dual }), { ip: '192.0.2.1', ip6: '2001:db8::1', podMtu: 1450, underlay: dual });
    // A node IP given for another device: the underlay's IPv6 address is not this node IP's partner.
    assert.equal((await nodeBasics(config({ routingMode: 'native', nodeIp: '198.51.100.1' }), { underlay: dual })).ip6, undefined);
  });

  it('an IPv6-only node: native routing and the overlay (over the IPv6 underlay, 20 bytes more of outer header) take the IPv6 node IP', async () => {
    assert.deepEqual(await nodeBasics(config({ routingMode: 'native' }), { underlay: v6only }), { ip: '2001:db8::1', ip6: undefined, podMtu: 1500, underlay: v6only });
    assert.deepEqual(await nodeBasics(config({ routingMode: 'tunnel' }), { underlay: v6only }), { ip: '2001:db8::1', ip6: undefined, podMtu: 1430, underlay: v6only });
    // An IPv6 node IP given on a dual-stack underlay: the outer header is IPv6 too.
    assert.equal((await nodeBasics(config({ routingMode: 'tunnel', nodeIp: '2001:db8::1' }), { underlay: dual })).podMtu, 1430);
    await assert.rejects(nodeBasics(config({ routingMode: 'tunnel', mtu: 1431 }), { underlay: v6only }), (err: unknown) => err instanceof NodeConfigError && /--mtu 1431 is larger .* 70 bytes of VXLAN over IPv6 = 1430/.test(err.message));
  });

  it('pods with IPv6 addresses need a pod MTU of at least 1280', async () => {
    await assert.rejects(nodeBasics(config({ routingMode: 'native', mtu: 1200 }), { underlay: dual }), (err: unknown) => err instanceof NodeConfigError && /at least 1280/.test(err.message));
    assert.equal((await nodeBasics(validateConfig({ ...defaultConfig(), podCidrs: ['10.0.0.0/24'], routingMode: 'native', mtu: 1200 }), { underlay: dual })).podMtu, 1200);
  });
});
