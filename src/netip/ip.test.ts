import assert from 'node:assert/strict';
import { isIP } from 'node:net';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import {
  NetipError,
  NetipErrorCode,
  compareIp,
  formatIp,
  ipFamilyOf,
  ipFromBigInt,
  ipFromBytes,
  ipToBytes,
  nextIp,
  parseIp,
  prevIp,
  tryParseIp,
  type IpAddress,
} from './index.js';

const v4 = (bits: bigint): IpAddress => ({ family: 4, bits });
const v6 = (bits: bigint): IpAddress => ({ family: 6, bits });
const anyAddress: fc.Arbitrary<IpAddress> = fc.oneof(
  fc.bigInt({ min: 0n, max: (1n << 32n) - 1n }).map(v4),
  fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }).map(v6),
  // Addresses with long zero runs, where the "::" choice matters.
  fc.array(fc.constantFrom(0, 0, 0, 1, 0xffff), { minLength: 8, maxLength: 8 }).map((g) => v6(g.reduce((acc, x) => (acc << 16n) | BigInt(x), 0n))),
);

describe('netip addresses', () => {
  it('parses and prints canonical text', () => {
    const cases: Array<[string, string, 4 | 6, bigint]> = [
      ['0.0.0.0', '0.0.0.0', 4, 0n],
      ['255.255.255.255', '255.255.255.255', 4, 0xffffffffn],
      ['10.1.2.3', '10.1.2.3', 4, 0x0a010203n],
      ['::', '::', 6, 0n],
      ['::1', '::1', 6, 1n],
      ['1::', '1::', 6, 1n << 112n],
      ['FD00:0000:0:0:0:0:0:0001', 'fd00::1', 6, (0xfd00n << 112n) | 1n],
      ['1:0:0:2:0:0:0:3', '1:0:0:2::3', 6, (1n << 112n) | (2n << 64n) | 3n],
      ['1:0:0:2:2:0:0:3', '1::2:2:0:0:3', 6, (1n << 112n) | (2n << 64n) | (2n << 48n) | 3n],
      ['1:0:2:0:3:0:4:0', '1:0:2:0:3:0:4:0', 6, (1n << 112n) | (2n << 80n) | (3n << 48n) | (4n << 16n)],
      ['1:2:3:4:5:6:7::', '1:2:3:4:5:6:7:0', 6, 0x0001000200030004000500060007_0000n],
      ['::2:3:4:5:6:7:8', '0:2:3:4:5:6:7:8', 6, 0x0000000200030004000500060007_0008n],
      // IPv4-embedded forms are read; output stays hex, as IPAM's kvstore keys always were.
      ['::ffff:10.0.0.1', '::ffff:a00:1', 6, 0xffff0a000001n],
      ['::1.2.3.4', '::102:304', 6, 0x01020304n],
      ['1:2:3:4:5:6:1.2.3.4', '1:2:3:4:5:6:102:304', 6, 0x0001000200030004000500060102_0304n],
    ];
    for (const [text, canonical, family, bits] of cases) {
      const a = parseIp(text);
      assert.deepEqual(a, { family, bits }, text);
      assert.equal(formatIp(a), canonical, text);
      assert.equal(ipFamilyOf(text), family, text);
    }
  });

  it('refuses what is not an address', () => {
    const bad = [
      '',
      '1.2.3',
      '1.2.3.4.5',
      '01.2.3.4',
      '1.2.3.04',
      '256.1.1.1',
      '1.2.3.-4',
      '+1.2.3.4',
      ' 1.2.3.4',
      '1.2.3.4 ',
      '1..2.3',
      '0x1.2.3.4',
      'fe80::1%eth0',
      ':',
      ':::',
      ':1::',
      '1:',
      '1::2::3',
      '12345::',
      '1:2:3:4:5:6:7:8:9',
      '1:2:3:4::5:6:7:8',
      '::1.2.3',
      '::01.2.3.4',
      '1:2:3:4:5:6:7:1.2.3.4',
      '::1.2.3.4:5',
      'g::1',
      '1.2.3.4/32',
    ];
    for (const text of bad) {
      assert.equal(tryParseIp(text), undefined, JSON.stringify(text));
      assert.equal(ipFamilyOf(text), 0, JSON.stringify(text));
      assert.throws(() => parseIp(text), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.INVALID_ADDRESS && err.input === text);
    }
  });

  it('accepts exactly what node:net accepts, zone IDs aside', () => {
    const agree = (text: string) => {
      const node = text.includes('%') ? 0 : isIP(text);
      assert.equal(ipFamilyOf(text), node, JSON.stringify(text));
    };
    // Strings over the address alphabet: mostly invalid, some valid, many near misses.
    const chars = fc.constantFrom(...'0123456789abcdefABCDEF:.:.:%g'.split(''));
    fc.assert(fc.property(fc.string({ unit: chars, maxLength: 45 }), agree), { numRuns: 20_000 });
    // Mutations of valid addresses: one character dropped, doubled or replaced.
    const valid = fc.oneof(fc.ipV4(), fc.ipV6(), fc.ipV4Extended());
    fc.assert(
      fc.property(valid, fc.nat(), chars, fc.constantFrom('drop', 'double', 'replace', 'none'), (ip, at, c, how) => {
        const i = at % ip.length;
        const text = how === 'drop' ? ip.slice(0, i) + ip.slice(i + 1) : how === 'double' ? ip.slice(0, i) + ip[i] + ip.slice(i) : how === 'replace' ? ip.slice(0, i) + c + ip.slice(i + 1) : ip;
        agree(text);
      }),
      { numRuns: 20_000 },
    );
  });

  it('prints what it parses back to the same address, in the form URL (WHATWG) prints IPv6', () => {
    fc.assert(
      fc.property(anyAddress, (a) => {
        const text = formatIp(a);
        assert.deepEqual(parseIp(text), a);
        if (a.family === 6) assert.equal(new URL(`http://[${text}]/`).hostname, `[${text}]`);
        else assert.equal(new URL(`http://${text}/`).hostname, text);
      }),
      { numRuns: 5000 },
    );
    fc.assert(fc.property(fc.ipV4(), (ip) => assert.equal(formatIp(parseIp(ip)), ip)));
  });

  it('converts to and from network-order bytes', () => {
    assert.deepEqual([...ipToBytes(parseIp('10.1.2.255'))], [10, 1, 2, 255]);
    assert.deepEqual([...ipToBytes(parseIp('fd00::1'))], [0xfd, 0, ...Array<number>(13).fill(0), 1]);
    const out = new Uint8Array(22).fill(0xee);
    ipToBytes(parseIp('::ffff:1.2.3.4'), out, 3);
    assert.deepEqual([...out.subarray(0, 3)], [0xee, 0xee, 0xee]);
    assert.deepEqual([...out.subarray(3, 19)], [...Array<number>(10).fill(0), 0xff, 0xff, 1, 2, 3, 4]);
    assert.deepEqual([...out.subarray(19)], [0xee, 0xee, 0xee]);
    assert.deepEqual(ipFromBytes(out, 6, 3), parseIp('::ffff:1.2.3.4'));
    assert.throws(() => ipToBytes(parseIp('1.2.3.4'), new Uint8Array(6), 3), RangeError);
    assert.throws(() => ipFromBytes(new Uint8Array(5)), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.OUT_OF_RANGE);
    assert.throws(() => ipFromBytes(new Uint8Array(16), 6, 1), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.OUT_OF_RANGE);
    fc.assert(
      fc.property(anyAddress, (a) => {
        const bytes = ipToBytes(a);
        assert.equal(bytes.length, a.family === 4 ? 4 : 16);
        // Network order: the bytes read as one big-endian hex number are the value.
        assert.equal(BigInt(`0x${Buffer.from(bytes).toString('hex')}`), a.bits);
        assert.deepEqual(ipFromBytes(bytes), a);
      }),
    );
  });

  it('converts from integers within the family only', () => {
    assert.deepEqual(ipFromBigInt(4, 0xffffffffn), v4(0xffffffffn));
    assert.deepEqual(ipFromBigInt(6, (1n << 128n) - 1n), v6((1n << 128n) - 1n));
    for (const [family, value] of [[4, 1n << 32n], [4, -1n], [6, 1n << 128n]] as const) {
      assert.throws(() => ipFromBigInt(family, value), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.OUT_OF_RANGE);
    }
  });

  it('orders addresses and steps through them', () => {
    assert.equal(nextIp(parseIp('255.255.255.255')), undefined);
    assert.equal(prevIp(parseIp('0.0.0.0')), undefined);
    assert.equal(nextIp(parseIp('ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff')), undefined);
    assert.equal(formatIp(nextIp(parseIp('10.0.0.255'))!), '10.0.1.0');
    assert.equal(formatIp(prevIp(parseIp('fd00::1:0'))!), 'fd00::ffff');
    assert.equal(compareIp(parseIp('255.255.255.255'), parseIp('::')), -1, 'IPv4 sorts first');
    fc.assert(
      fc.property(anyAddress, anyAddress, (a, b) => {
        const c = compareIp(a, b);
        // 0 - c, not -c: strict equality tells -0 from 0, and equal addresses compare as 0.
        assert.equal(compareIp(b, a), 0 - c);
        if (a.family === b.family) assert.equal(c, a.bits < b.bits ? -1 : a.bits > b.bits ? 1 : 0);
        const n = nextIp(a);
        if (n !== undefined) {
          assert.equal(compareIp(a, n), -1);
          assert.deepEqual(prevIp(n), a);
        }
      }),
    );
  });
});
