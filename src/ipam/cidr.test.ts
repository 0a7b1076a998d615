import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NetipError, NetipErrorCode, formatPrefix, parseIp as netipParseIp } from '../netip/index.js';
import { parseCidr, parseIp } from './cidr.js';
import { IpamError, IpamErrorCode } from './errors.js';

/** An IpamError IPAM_INVALID_CIDR whose cause is netip's refusal with `code`. */
function invalidCidr(code: NetipErrorCode) {
  return (err: unknown) => err instanceof IpamError && err.code === IpamErrorCode.INVALID_CIDR && err.cause instanceof NetipError && err.cause.code === code;
}

describe('IPAM\'s parsing boundary over src/netip', () => {
  it('reads addresses as netip does and refuses others as IpamError', () => {
    assert.deepEqual(parseIp('fd00:0:0:0:0:0:0:1'), netipParseIp('fd00::1'));
    assert.deepEqual(parseIp('10.0.0.7'), { family: 4, bits: 0x0a000007n });
    for (const bad of ['10.0.0.256', 'fe80::1%eth0', '10.0.0.0/24', '']) assert.throws(() => parseIp(bad), invalidCidr(NetipErrorCode.INVALID_ADDRESS), bad);
  });

  it('reads CIDRs as a netconf writes them: leading zeros in the length, host bits refused unless allowed', () => {
    assert.equal(formatPrefix(parseCidr('10.0.0.0/08')), '10.0.0.0/8');
    assert.equal(formatPrefix(parseCidr('FD00:0::/064')), 'fd00::/64');
    assert.equal(formatPrefix(parseCidr('10.0.0.7/24', true)), '10.0.0.0/24');
    assert.throws(() => parseCidr('10.0.0.7/24'), invalidCidr(NetipErrorCode.HOST_BITS));
    assert.throws(() => parseCidr('10.0.0.0/33'), invalidCidr(NetipErrorCode.INVALID_PREFIX));
    assert.throws(() => parseCidr('10.0.0.0'), invalidCidr(NetipErrorCode.INVALID_PREFIX));
    assert.throws(() => parseCidr('10.0.0.300/24'), invalidCidr(NetipErrorCode.INVALID_ADDRESS));
  });
});
