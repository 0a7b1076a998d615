import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseIp, parsePrefix, prefixContains, prefixContainsIp } from '../../src/netip/index.js';
import { addressesByVersion, cidrIn, cidrLabelOf, hostCidr, hostPort, ipIn, mirrorIp, mirrorPrefix, podCidrsOf, versionsOf } from './family.js';

test('the IPv6 mirror keeps each address at its place in each prefix', () => {
  assert.equal(mirrorIp('10.199.0.200'), 'fd74:10:199::c8');
  assert.equal(mirrorPrefix('10.199.0.0/24'), 'fd74:10:199::/120');
  assert.equal(mirrorPrefix('10.199.0.128/25'), 'fd74:10:199::80/121');
  assert.equal(mirrorPrefix('10.199.0.200/32'), 'fd74:10:199::c8/128');
  // Inside and outside on IPv4 is inside and outside on IPv6.
  const cases: Array<[string, string]> = [
    ['10.199.0.0/24', '10.199.0.10'],
    ['10.199.0.0/24', '10.199.0.200'],
    ['10.199.0.128/25', '10.199.0.10'],
    ['10.199.0.128/25', '10.199.0.200'],
    ['10.199.0.0/24', '10.198.0.7'],
  ];
  for (const [cidr, ip] of cases) {
    assert.equal(prefixContainsIp(parsePrefix(mirrorPrefix(cidr)), parseIp(mirrorIp(ip))), prefixContainsIp(parsePrefix(cidr), parseIp(ip)), `${ip} in ${cidr}`);
  }
  assert.ok(prefixContains(parsePrefix(mirrorPrefix('10.199.0.0/24')), parsePrefix(mirrorPrefix('10.199.0.128/25'))));
});

test('a /0 stays in its own family; prefixes the mirror cannot keep are refused', () => {
  assert.equal(mirrorPrefix('0.0.0.0/0'), '::/0');
  assert.equal(cidrIn(4, '0.0.0.0/0'), '0.0.0.0/0');
  assert.throws(() => mirrorPrefix('10.0.0.0/8'), /\/24 and longer/);
});

test('per family: pod CIDRs, versions, address:port and host prefixes', () => {
  assert.deepEqual(versionsOf('dual'), [4, 6]);
  assert.deepEqual(podCidrsOf(4, '10.252.0.0/24'), ['10.252.0.0/24']);
  assert.deepEqual(podCidrsOf(6, '10.252.0.0/24'), ['fd74:10:252::/120']);
  assert.deepEqual(podCidrsOf('dual', '10.252.0.0/24'), ['10.252.0.0/24', 'fd74:10:252::/120']);
  assert.equal(hostPort(ipIn(4, '10.0.0.1'), 80), '10.0.0.1:80');
  assert.equal(hostPort(ipIn(6, '10.0.0.1'), 80), '[fd74:10::1]:80');
  assert.equal(hostCidr('fd74:10:252::1'), 'fd74:10:252::1/128');
  assert.deepEqual(addressesByVersion(['fd74:10:252::5/128', '10.252.0.5/32']), { 4: '10.252.0.5', 6: 'fd74:10:252::5' });
  assert.equal(cidrLabelOf('fd74:10:199::/120'), 'cidr:fd74-10-199--0/120');
  assert.equal(cidrLabelOf('10.199.0.0/24'), 'cidr:10.199.0.0/24');
});
