import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NodeRecordError } from './errors.js';
import { decodeNodeRecord, encodeNodeRecord, nodeIpOfFamily, podCidrsOfFamily, primaryNodeIp } from './nodeRecord.js';
import { nodeRecord } from './testing/registrySuite.js';

describe('node record codec', () => {
  it('round-trips a record in canonical form', () => {
    const r = nodeRecord('node-a', 1, {
      addresses: [
        { type: 'InternalIP', ip: 'FD00:0:0::1' },
        { type: 'InternalIP', ip: '192.168.50.1' },
        { type: 'RouterIP', ip: '10.200.1.1' },
      ],
      podCidrs: ['10.200.1.0/24', 'FD00:200::/64'],
    });
    const text = encodeNodeRecord(r);
    const back = decodeNodeRecord(text, 'node-a');
    assert.ok(typeof back !== 'string', String(back));
    assert.equal(back.addresses[0]!.ip, 'fd00::1');
    assert.deepEqual(back.podCidrs, ['10.200.1.0/24', 'fd00:200::/64']);
    assert.equal(encodeNodeRecord(back), text.replace('FD00:0:0::1', 'fd00::1').replace('FD00:200::/64', 'fd00:200::/64'));
    assert.equal(primaryNodeIp(back), '192.168.50.1', 'the first IPv4 InternalIP, not the first address');
    // Per family, for a dual-stack node: its IPv6 InternalIP and IPv6 pod CIDRs.
    assert.equal(nodeIpOfFamily(back, 6), 'fd00::1');
    assert.equal(nodeIpOfFamily(back, 4), '192.168.50.1');
    assert.deepEqual(podCidrsOfFamily(back, 6), ['fd00:200::/64']);
    assert.deepEqual(podCidrsOfFamily(back, 4), ['10.200.1.0/24']);
    assert.equal(nodeIpOfFamily({ ...back, addresses: back.addresses.filter((a) => a.ip !== 'fd00::1') }, 6), undefined, 'an IPv4-only node has no IPv6 next hop');
    // A record is another node's word: an InternalIP that is no host's unicast address is no next hop.
    const lying = { ...back, addresses: ['::1', 'fe80::1', 'ff02::1', '::ffff:10.0.0.1', '127.0.0.1', '169.254.1.1', '224.0.0.1'].map((ip) => ({ type: 'InternalIP' as const, ip })) };
    assert.equal(nodeIpOfFamily(lying, 6), undefined);
    assert.equal(nodeIpOfFamily(lying, 4), undefined);
    assert.equal(nodeIpOfFamily({ ...lying, addresses: [...lying.addresses, { type: 'InternalIP', ip: 'fd00::7' }] }, 6), 'fd00::7', 'the first unicast one');
  });

  it('says why a record is unusable instead of throwing', () => {
    const good = nodeRecord('node-a', 1);
    const cases: Array<[string, RegExp]> = [
      ['{', /not JSON/],
      ['null', /record/],
      [JSON.stringify({ ...good, name: 'a/b' }), /name/],
      [JSON.stringify({ ...good, podCidrs: ['10.0.0.1/8'] }), /podCidrs/],
      [JSON.stringify({ ...good, addresses: [{ type: 'Hostname', ip: '1.2.3.4' }] }), /addresses/],
      [JSON.stringify({ ...good, routingMode: 'geneve' }), /routingMode/],
      [JSON.stringify({ ...good, tunnel: { protocol: 'vxlan', port: 70000 } }), /tunnel/],
      [JSON.stringify({ ...good, startedAt: 'yesterday' }), /startedAt/],
      [JSON.stringify({ ...good, podCidrs: Array.from({ length: 5000 }, () => '10.0.0.0/8') }), /podCidrs/],
    ];
    for (const [text, why] of cases) {
      const r = decodeNodeRecord(text);
      assert.equal(typeof r, 'string', text.slice(0, 80));
      assert.match(r as string, why);
    }
    assert.match(decodeNodeRecord(JSON.stringify(good), 'node-b') as string, /node-a.*node-b/);
  });

  it('refuses to encode a record other nodes could not decode', () => {
    assert.throws(() => encodeNodeRecord(nodeRecord('node-a', 1, { tunnel: undefined })), NodeRecordError);
    assert.doesNotThrow(() => encodeNodeRecord(nodeRecord('node-a', 1, { routingMode: 'native', tunnel: undefined })));
    const long = decodeNodeRecord(encodeNodeRecord(nodeRecord('node-a', 1, { health: { status: 'degraded', reason: 'x'.repeat(5000) } })));
    assert.ok(typeof long !== 'string' && long.health.reason!.length === 1024, 'a long health reason is cut, not refused');
  });
});

describe('node record: the flows address', () => {
  it('is optional: a record without it (an older agent\'s) decodes, one with it keeps it', () => {
    const r = nodeRecord('node-f', 1);
    const without = decodeNodeRecord(encodeNodeRecord(r), 'node-f');
    assert.ok(typeof without !== 'string' && without.flows === undefined, String(without));
    for (const address of ['10.0.0.11:4245', '[fd00::11]:4245', 'node-f.example:4245']) {
      const back = decodeNodeRecord(encodeNodeRecord({ ...r, flows: { address, tls: true } }), 'node-f');
      assert.ok(typeof back !== 'string', String(back));
      assert.deepEqual(back.flows, { address, tls: true });
    }
  });

  it('a flows address that is not host:port makes the record unusable, with the reason', () => {
    const r = nodeRecord('node-f', 1);
    for (const address of ['10.0.0.11', '10.0.0.11:0', '10.0.0.11:70000', 'fd00::11:4245', 'http://x:1']) {
      const text = JSON.stringify({ ...r, flows: { address, tls: false } });
      assert.match(String(decodeNodeRecord(text, 'node-f')), /flows\.address: not host:port/, address);
    }
  });
});
