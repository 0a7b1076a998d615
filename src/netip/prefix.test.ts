import assert from 'node:assert/strict';
import { endianness } from 'node:os';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  NetipError,
  NetipErrorCode,
  familyBits,
  formatIp,
  formatInterfaceAddress,
  formatPrefix,
  hostPrefix,
  ipToBytes,
  lpmKey,
  lpmKeyLength,
  maskBits,
  parseIp,
  parseInterfaceAddress,
  parsePrefix,
  prefixContains,
  prefixContainsIp,
  prefixFirst,
  prefixFromLpmKey,
  prefixLast,
  prefixOf,
  prefixOverlaps,
  prefixSize,
  subnetAt,
  subnetCount,
  tryParseInterfaceAddress,
  tryParsePrefix,
  type IpAddress,
  type IpPrefix,
  type PrefixParseOptions,
} from './index.js';

const address: fc.Arbitrary<IpAddress> = fc.oneof(
  fc.bigInt({ min: 0n, max: (1n << 32n) - 1n }).map((bits): IpAddress => ({ family: 4, bits })),
  fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }).map((bits): IpAddress => ({ family: 6, bits })),
);
const prefix: fc.Arbitrary<IpPrefix> = address.chain((a) => fc.integer({ min: 0, max: familyBits(a.family) }).map((len) => prefixOf(a, len)));
/** Two IPv4 prefixes drawn near each other, so containment and overlap both happen often. */
const nearbyV4Pair: fc.Arbitrary<[IpPrefix, IpPrefix]> = fc
  .tuple(fc.bigInt({ min: 0n, max: 255n }), fc.bigInt({ min: 0n, max: 255n }), fc.integer({ min: 20, max: 32 }), fc.integer({ min: 20, max: 32 }))
  .map(([x, y, lx, ly]) => [prefixOf({ family: 4, bits: 0x0a000000n | (x << 4n) }, lx), prefixOf({ family: 4, bits: 0x0a000000n | (y << 4n) }, ly)]);

/** Reference semantics: a prefix is the closed range [first, last]. */
function range(p: IpPrefix): [bigint, bigint] {
  return [prefixFirst(p).bits, prefixLast(p).bits];
}

describe('netip prefixes', () => {
  it('reads each caller’s rules: host bits, bare addresses, leading zeros', () => {
    const cases: Array<[string, PrefixParseOptions | undefined, string | NetipErrorCode]> = [
      ['10.0.0.0/8', undefined, '10.0.0.0/8'],
      ['0.0.0.0/0', undefined, '0.0.0.0/0'],
      ['10.1.2.3/32', undefined, '10.1.2.3/32'],
      ['FD00::/64', undefined, 'fd00::/64'],
      ['::/0', undefined, '::/0'],
      ['10.0.0.1/8', undefined, NetipErrorCode.HOST_BITS],
      ['10.0.0.1/8', { hostBits: 'mask' }, '10.0.0.0/8'],
      ['fd00::1/64', { hostBits: 'mask' }, 'fd00::/64'],
      ['10.0.0.0/08', undefined, NetipErrorCode.INVALID_PREFIX],
      ['10.0.0.0/08', { leadingZeros: true }, '10.0.0.0/8'],
      ['0.0.0.0/000', { leadingZeros: true }, '0.0.0.0/0'],
      ['10.0.0.0/000', { leadingZeros: true }, NetipErrorCode.HOST_BITS],
      ['10.0.0.0/0008', { leadingZeros: true }, NetipErrorCode.INVALID_PREFIX],
      ['10.0.0.0/33', undefined, NetipErrorCode.INVALID_PREFIX],
      ['fd00::/129', undefined, NetipErrorCode.INVALID_PREFIX],
      ['fd00::/128', undefined, 'fd00::/128'],
      ['10.0.0.0', undefined, NetipErrorCode.INVALID_PREFIX],
      ['10.0.0.7', { bareAddress: true }, '10.0.0.7/32'],
      ['fd00::7', { bareAddress: true }, 'fd00::7/128'],
      ['10.0.0.0/', undefined, NetipErrorCode.INVALID_PREFIX],
      ['/8', undefined, NetipErrorCode.INVALID_ADDRESS],
      ['10.0.0.0/8/8', undefined, NetipErrorCode.INVALID_PREFIX],
      ['10.0.0.0/-1', undefined, NetipErrorCode.INVALID_PREFIX],
      ['10.0.0.0/ 8', undefined, NetipErrorCode.INVALID_PREFIX],
      ['10.0.0.0/+8', undefined, NetipErrorCode.INVALID_PREFIX],
      ['10.0.0/8', undefined, NetipErrorCode.INVALID_ADDRESS],
      ['fe80::%eth0/64', undefined, NetipErrorCode.INVALID_ADDRESS],
      ['fe80::1%eth0', { bareAddress: true }, NetipErrorCode.INVALID_ADDRESS],
    ];
    for (const [text, opts, want] of cases) {
      const what = `${text} ${JSON.stringify(opts)}`;
      if (want.includes('/')) {
        assert.equal(formatPrefix(parsePrefix(text, opts)), want, what);
        assert.equal(formatPrefix(tryParsePrefix(text, opts)!), want, what);
      } else {
        assert.equal(tryParsePrefix(text, opts), undefined, what);
        assert.throws(() => parsePrefix(text, opts), (err: unknown) => err instanceof NetipError && err.code === want && err.input === text, what);
      }
    }
  });

  it('reads interface addresses with their host bits', () => {
    const a = parseInterfaceAddress('10.0.0.5/24');
    assert.deepEqual(a, { address: parseIp('10.0.0.5'), length: 24 });
    assert.equal(formatPrefix(prefixOf(a.address, a.length)), '10.0.0.0/24');
    assert.equal(formatInterfaceAddress(parseInterfaceAddress('FD00::5/064', { leadingZeros: true })), 'fd00::5/64');
    for (const bad of ['10.0.0.5', '10.0.0.5/33', '10.0.0.5/08', 'fe80::1%eth0/64', '10.0.0.5/']) {
      assert.equal(tryParseInterfaceAddress(bad), undefined, bad);
      assert.throws(() => parseInterfaceAddress(bad), NetipError, bad);
    }
    fc.assert(
      fc.property(address, fc.nat(128), (addr, n) => {
        const len = n % (familyBits(addr.family) + 1);
        const text = `${formatIp(addr)}/${len}`;
        assert.deepEqual(parseInterfaceAddress(text), { address: addr, length: len });
        assert.deepEqual(parsePrefix(text, { hostBits: 'mask' }), prefixOf(addr, len));
      }),
    );
  });

  it('says what is wrong, in the words IPAM has always used', () => {
    const message = (text: string) => {
      try {
        parsePrefix(text);
      } catch (err) {
        return (err as Error).message;
      }
      return 'parsed';
    };
    assert.equal(message('10.0.0.1/8'), '"10.0.0.1/8" has host bits set (did you mean 10.0.0.0/8?)');
    assert.equal(message('10.0.0.0/33'), '"10.0.0.0/33": prefix length 33 > 32');
    assert.equal(message('10.0.0.300/24'), '"10.0.0.300" is not an IP address');
    assert.equal(message('10.0.0.0'), '"10.0.0.0" is not a CIDR (expected address/prefix-length)');
  });

  it('round-trips canonical text', () => {
    fc.assert(
      fc.property(prefix, (p) => {
        assert.deepEqual(parsePrefix(formatPrefix(p)), p);
        assert.equal(maskBits(p.family, p.bits, p.length), p.bits);
      }),
      { numRuns: 3000 },
    );
  });

  it('masks like shifting the host bits out', () => {
    fc.assert(
      fc.property(address, fc.nat(128), (a, n) => {
        const len = n % (familyBits(a.family) + 1);
        const host = BigInt(familyBits(a.family) - len);
        assert.equal(maskBits(a.family, a.bits, len), (a.bits >> host) << host);
        assert.deepEqual(prefixOf(a, len), { family: a.family, bits: (a.bits >> host) << host, length: len });
      }),
      { numRuns: 3000 },
    );
    assert.throws(() => prefixOf(parseIp('1.2.3.4'), 33), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.INVALID_PREFIX);
    assert.throws(() => prefixOf(parseIp('1.2.3.4'), 1.5), (err: unknown) => err instanceof NetipError);
  });

  it('contains, containsPrefix and overlaps agree with address ranges', () => {
    fc.assert(
      fc.property(prefix, address, (p, a) => {
        const [lo, hi] = range(p);
        assert.equal(prefixContainsIp(p, a), p.family === a.family && lo <= a.bits && a.bits <= hi);
      }),
      { numRuns: 3000 },
    );
    fc.assert(
      fc.property(fc.oneof(nearbyV4Pair, fc.tuple(prefix, prefix)), ([p, q]) => {
        const [plo, phi] = range(p);
        const [qlo, qhi] = range(q);
        const same = p.family === q.family;
        assert.equal(prefixContains(p, q), same && plo <= qlo && qhi <= phi, `${formatPrefix(p)} ⊇ ${formatPrefix(q)}`);
        assert.equal(prefixOverlaps(p, q), same && plo <= qhi && qlo <= phi, `${formatPrefix(p)} ∩ ${formatPrefix(q)}`);
        assert.equal(prefixOverlaps(p, q), prefixOverlaps(q, p));
      }),
      { numRuns: 3000 },
    );
    assert.equal(prefixContainsIp(parsePrefix('0.0.0.0/0'), parseIp('::')), false, 'families never mix');
  });

  it('knows its size, ends and subnets', () => {
    const p = parsePrefix('10.0.0.0/24');
    assert.equal(prefixSize(p), 256n);
    assert.equal(formatIp(prefixFirst(p)), '10.0.0.0');
    assert.equal(formatIp(prefixLast(p)), '10.0.0.255');
    assert.equal(prefixSize(parsePrefix('fd00::/122')), 64n);
    assert.equal(formatIp(prefixLast(parsePrefix('::/0'))), 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff');
    assert.equal(formatPrefix(subnetAt(p, 26, 3n)), '10.0.0.192/26');
    assert.equal(subnetCount(p, 26), 4n);
    assert.deepEqual(hostPrefix(parseIp('fd00::5')), parsePrefix('fd00::5/128'));
    fc.assert(
      fc.property(prefix, fc.nat(8), fc.bigInt({ min: 0n, max: 255n }), (q, extra, i) => {
        const len = Math.min(familyBits(q.family), q.length + extra);
        const index = i % subnetCount(q, len);
        const s = subnetAt(q, len, index);
        assert.ok(prefixContains(q, s));
        assert.equal(maskBits(s.family, s.bits, s.length), s.bits);
        assert.equal(prefixSize(s) * subnetCount(q, len), prefixSize(q));
      }),
    );
  });

  it('encodes LPM trie keys: host-order prefixlen, then the address in network order', () => {
    const key = lpmKey(parsePrefix('10.1.0.0/16'));
    const lenBytes = endianness() === 'LE' ? [16, 0, 0, 0] : [0, 0, 0, 16];
    assert.deepEqual([...key], [...lenBytes, 10, 1, 0, 0]);
    assert.equal(lpmKey(parsePrefix('fd00::/8')).length, 20);
    fc.assert(
      fc.property(prefix, (p) => {
        const k = lpmKey(p);
        assert.equal(Buffer.from(k).subarray(0, 4)[endianness() === 'LE' ? 'readUInt32LE' : 'readUInt32BE'](0), p.length);
        assert.deepEqual([...k.subarray(4)], [...ipToBytes(p)]);
        assert.deepEqual(prefixFromLpmKey(k), p);
      }),
    );
    assert.throws(() => prefixFromLpmKey(new Uint8Array(9)), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.OUT_OF_RANGE);
    const withHostBits = lpmKey(parsePrefix('10.1.0.0/16'));
    withHostBits[7] = 1;
    assert.throws(() => prefixFromLpmKey(withHostBits), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.HOST_BITS);
    const tooLong = lpmKey(parsePrefix('10.1.0.0/16'));
    tooLong.set(lenBytes.map((b) => (b === 16 ? 33 : b)), 0);
    assert.throws(() => prefixFromLpmKey(tooLong), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.INVALID_PREFIX);
  });

  it('writes and reads LPM keys in place, and refuses prefixes no parser would make', () => {
    const buf = new Uint8Array(2 + 20 + 2).fill(0xee);
    const p = parsePrefix('fd00:77::/32');
    assert.equal(lpmKey(p, buf, 2), buf);
    assert.deepEqual([...buf.subarray(2, 22)], [...lpmKey(p)]);
    assert.deepEqual([...buf.subarray(0, 2)], [0xee, 0xee]);
    assert.deepEqual([...buf.subarray(22)], [0xee, 0xee]);
    assert.deepEqual(prefixFromLpmKey(buf, 6, 2), p);
    assert.equal(lpmKeyLength(4), 8);
    assert.equal(lpmKeyLength(6), 20);
    assert.throws(() => lpmKey(p, buf, 5), RangeError);
    assert.throws(() => prefixFromLpmKey(buf, 6, 5), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.OUT_OF_RANGE);
    const code = (c: NetipErrorCode) => (err: unknown) => err instanceof NetipError && err.code === c;
    assert.throws(() => lpmKey({ family: 4, bits: 0x0a010203n, length: 16 }), code(NetipErrorCode.HOST_BITS));
    assert.throws(() => lpmKey({ family: 4, bits: 0n, length: 33 }), code(NetipErrorCode.INVALID_PREFIX));
    assert.throws(() => lpmKey({ family: 6, bits: 0n, length: -1 }), code(NetipErrorCode.INVALID_PREFIX));
    assert.throws(() => lpmKey({ family: 6, bits: 0n, length: 1.5 }), code(NetipErrorCode.INVALID_PREFIX));
  });
});
