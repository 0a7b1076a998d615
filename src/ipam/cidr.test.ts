import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { cidrSize, formatCidr, formatIp, parseCidr, parseIp, subnetAt } from './cidr.js';

describe('cidr arithmetic', () => {
  it('formats IPv6 in RFC 5952 form', () => {
    assert.equal(formatIp(6, parseIp('fd00:0:0:0:0:0:0:1').value), 'fd00::1');
    assert.equal(formatIp(6, parseIp('::').value), '::');
    assert.equal(formatIp(6, parseIp('1:0:0:2:0:0:0:3').value), '1:0:0:2::3');
    assert.equal(formatIp(6, parseIp('1:0:2:0:3:0:4:0').value), '1:0:2:0:3:0:4:0');
    assert.equal(formatIp(6, parseIp('::ffff:10.0.0.1').value), '::ffff:a00:1');
  });

  it('round-trips any address', () => {
    fc.assert(
      fc.property(fc.ipV6(), (ip) => {
        const { value } = parseIp(ip);
        assert.equal(parseIp(formatIp(6, value)).value, value);
      }),
    );
    fc.assert(
      fc.property(fc.ipV4(), (ip) => {
        assert.equal(formatIp(4, parseIp(ip).value), ip);
      }),
    );
  });

  it('carves subnets', () => {
    const pool = parseCidr('10.0.0.0/24');
    assert.equal(formatCidr(subnetAt(pool, 26, 3n)), '10.0.0.192/26');
    assert.equal(cidrSize(parseCidr('fd00::/122')), 64n);
    assert.equal(formatCidr(parseCidr('10.0.0.7/24', true)), '10.0.0.0/24');
  });
});
