import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { NetipError, NetipErrorCode, lpmKey as netipLpmKey, parseIp, parsePrefix } from '../../../netip/index.js';
import { array, bytes, decode, encode, i32, ipAddress, lpmKey, lpmPrefix, mapped, pad, perCpu, struct, u16be, u32, u32be, u64, u8 } from './codec.js';
import { POSSIBLE_CPUS_FILE, parseCpuList, possibleCpus } from './cpus.js';
import { nativeBpf } from './native.js';
import { counterCodec, eventCodec } from './testing/kernelTest.js';
import { internetChecksum, ipv4Bytes, ipv4Packet, ipv4String } from './testing/packets.js';

describe('bpf codecs', () => {
  it('lays out structs as C does: natural alignment, zeroed padding, size rounded up', () => {
    // struct { __u8 proto; __u16 port (network order); __u32 id; __u64 bytes; __u8 dir; }
    const c = struct({ proto: u8, port: u16be, id: u32, bytes: u64, dir: u8 });
    assert.equal(c.size, 24); // 1, pad 1, 2, 4, 8, 1, pad 7
    assert.equal(c.align, 8);
    const buf = encode(c, { proto: 6, port: 443, id: 7, bytes: 1n << 40n, dir: 1 });
    assert.deepEqual(
      [...buf],
      [6, 0, 0x01, 0xbb, 7, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0],
    );
    assert.deepEqual(decode(c, buf), { proto: 6, port: 443, id: 7, bytes: 1n << 40n, dir: 1 });
  });

  it('writes padding as zeros over a dirty buffer (hash keys compare every byte)', () => {
    const c = struct({ a: u8, b: u32 });
    const buf = Buffer.alloc(8, 0xff);
    c.write({ a: 1, b: 2 }, buf, 0);
    assert.deepEqual([...buf], [1, 0, 0, 0, 2, 0, 0, 0]);
  });

  it('keeps explicit padding out of struct values', () => {
    const c = struct({ a: u8, _pad: pad(3), b: u32 });
    assert.equal(c.size, 8);
    const v = decode(c, encode(c, { a: 9, b: 10 }));
    assert.deepEqual(v, { a: 9, b: 10 });
  });

  it('matches the test object\'s C structs', () => {
    assert.equal(counterCodec.size, 16);
    assert.equal(eventCodec.size, 16);
  });

  it('encodes LPM trie keys: host-order prefix length, then the data', () => {
    const k = lpmKey(bytes(4));
    assert.equal(k.size, 8);
    const buf = encode(k, { prefixLen: 24, data: ipv4Bytes('10.1.2.0') });
    assert.equal(buf.readUInt32LE(0), 24);
    assert.deepEqual([...buf.subarray(4)], [10, 1, 2, 0]);
    assert.throws(() => encode(k, { prefixLen: 33, data: ipv4Bytes('10.1.2.0') }), /outside 0\.\.32/);
  });

  it('encodes IP prefixes as LPM keys through src/netip', () => {
    const v4 = lpmPrefix(4);
    const v6 = lpmPrefix(6);
    assert.deepEqual([v4.size, v4.align, v6.size, v6.align], [8, 4, 20, 4]);
    for (const [codec, text] of [[v4, '10.1.2.0/24'], [v4, '0.0.0.0/0'], [v6, 'fd00:77::/32'], [v6, '::1/128']] as const) {
      const p = parsePrefix(text);
      const buf = encode(codec, p);
      assert.deepEqual([...buf], [...netipLpmKey(p)], text);
      assert.deepEqual(decode(codec, buf), p, text);
    }
    assert.equal(encode(v4, parsePrefix('10.1.2.0/24')).readUInt32LE(0), 24);
    // In a struct (a value holding a key, say), at its offset and alignment.
    const s = struct({ tag: u8, key: v6 });
    assert.equal(s.size, 24);
    assert.deepEqual(decode(s, encode(s, { tag: 7, key: parsePrefix('fd00::/8') })), { tag: 7, key: parsePrefix('fd00::/8') });
    assert.throws(() => encode(v4, parsePrefix('fd00::/8')), /IPv6 prefix in an IPv4 LPM key/);
    assert.throws(() => encode(v4, { family: 4, bits: 0x0a010203n, length: 24 }), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.HOST_BITS);
    const hostBits = encode(v4, parsePrefix('10.1.2.0/24'));
    hostBits[7] = 9;
    assert.throws(() => decode(v4, hostBits), (err: unknown) => err instanceof NetipError && err.code === NetipErrorCode.HOST_BITS);
  });

  it('encodes IP addresses in network order through src/netip', () => {
    assert.deepEqual([...encode(ipAddress(4), parseIp('192.168.1.9'))], [192, 168, 1, 9]);
    assert.deepEqual(decode(ipAddress(6), encode(ipAddress(6), parseIp('fd00::1'))), parseIp('fd00::1'));
    assert.equal(ipAddress(6).size, 16);
    assert.throws(() => encode(ipAddress(4), parseIp('::1')), /IPv6 address in an IPv4 field/);
  });

  it('sizes per-CPU values in 8-byte slots', () => {
    const c = perCpu(u32, 3);
    assert.equal(c.size, 24);
    const buf = encode(c, [1, 2, 3]);
    assert.deepEqual([buf.readUInt32LE(0), buf.readUInt32LE(8), buf.readUInt32LE(16)], [1, 2, 3]);
    assert.deepEqual(decode(c, buf), [1, 2, 3]);
    assert.throws(() => encode(c, [1, 2]), /each of 3 CPUs/);
  });

  it('encodes arrays, network-order fields and mapped representations', () => {
    assert.deepEqual([...encode(array(u16be, 2), [1, 0x0203])], [0, 1, 2, 3]);
    assert.deepEqual([...encode(u32be, 0x0a000001)], [10, 0, 0, 1]);
    assert.equal(decode(i32, encode(i32, -5)), -5);
    const addr = mapped(bytes(4), ipv4String, ipv4Bytes);
    assert.deepEqual([...encode(addr, '192.168.1.9')], [192, 168, 1, 9]);
    assert.equal(decode(addr, Buffer.from([10, 9, 8, 7])), '10.9.8.7');
  });

  it('refuses values and buffers of the wrong size', () => {
    assert.throws(() => encode(bytes(4), Buffer.alloc(3)), /expected 4 bytes/);
    assert.throws(() => decode(u32, Buffer.alloc(8)), /cannot decode 8 bytes/);
    assert.throws(() => encode(u32, -1), RangeError);
    assert.throws(() => encode(u8, 256), RangeError);
  });
});

describe('possible CPUs', () => {
  it('parses kernel CPU lists', () => {
    assert.equal(parseCpuList('0\n'), 1);
    assert.equal(parseCpuList('0-3'), 4);
    assert.equal(parseCpuList('0,2-5,8'), 6);
    assert.throws(() => parseCpuList(''), /empty/);
    assert.throws(() => parseCpuList('0-x'), /malformed/);
    assert.throws(() => parseCpuList('3-1'), /malformed/);
  });

  it('agrees with libbpf on this machine', () => {
    assert.equal(possibleCpus(), parseCpuList(readFileSync(POSSIBLE_CPUS_FILE, 'utf8')));
    assert.equal(possibleCpus(), nativeBpf().possibleCpus());
  });
});

describe('test packets', () => {
  it('builds an IPv4 packet whose header checksum verifies', () => {
    const p = ipv4Packet({ src: '10.0.0.1', dst: '10.0.0.2', payloadLength: 10 });
    assert.equal(p.length, 14 + 20 + 8 + 10);
    assert.equal(p.readUInt16BE(12), 0x0800);
    assert.equal(internetChecksum(p.subarray(14, 34)), 0);
    assert.equal(ipv4String(p.subarray(26, 30)), '10.0.0.1');
    assert.throws(() => ipv4Bytes('10.0.0.256'), /not an IPv4 address/);
  });
});
