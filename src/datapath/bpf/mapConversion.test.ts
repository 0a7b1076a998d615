/**
 * The field-by-field conversion between two layouts: fields found by name
 * wherever they moved, integers converted by value across sizes and byte
 * orders, new fields zero, removed ones dropped, a value that does not fit
 * refused, a kind change left zero and said.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Field, Layout } from './btfLayout.js';
import { compileConversion } from './mapConversion.js';

const u = (size: number, bigEndian = false): Layout => ({ kind: 'int', size, signed: false, bigEndian });
const s = (size: number): Layout => ({ kind: 'int', size, signed: true, bigEndian: false });
const struct = (size: number, ...fields: Array<[string, number, Layout]>): Layout => ({ kind: 'struct', size, fields: fields.map(([name, offset, layout]): Field => ({ name, offset, layout })) });

describe('layout conversion', () => {
  it('moves fields by name, zeroes the new one, drops the removed one', () => {
    const from = struct(12, ['a', 0, u(4)], ['gone', 4, u(4)], ['port', 8, u(2, true)], ['pad', 10, u(2)]);
    const to = struct(12, ['port', 0, u(2, true)], ['added', 2, u(2)], ['a', 4, u(4)], ['pad2', 8, u(4)]);
    const c = compileConversion(from, to);
    assert.equal(c.identical, false);
    assert.deepEqual(c.changes, ['added added (zero)', 'added pad2 (zero)', 'removed gone', 'removed pad']);
    const src = Buffer.alloc(12);
    src.writeUInt32LE(0xdeadbeef, 0);
    src.writeUInt32LE(7, 4);
    src.writeUInt16BE(8080, 8);
    const out = new Uint8Array(12);
    assert.equal(c.convert(src, 0, out, 0), true);
    const o = Buffer.from(out);
    assert.equal(o.readUInt16BE(0), 8080);
    assert.equal(o.readUInt16LE(2), 0);
    assert.equal(o.readUInt32LE(4), 0xdeadbeef);
    assert.equal(o.readUInt32LE(8), 0);
  });

  it('converts an integer by value across sizes and byte orders, and refuses a value that does not fit', () => {
    const c = compileConversion(struct(4, ['v', 0, u(4)]), struct(2, ['v', 0, u(2, true)]));
    assert.deepEqual(c.changes, ['v: u32 → u16be (converted by value)']);
    const out = new Uint8Array(2);
    assert.equal(c.convert(Buffer.from([0x34, 0x12, 0, 0]), 0, out, 0), true);
    assert.deepEqual([...out], [0x12, 0x34]);
    assert.equal(c.convert(Buffer.from([0, 0, 1, 0]), 0, new Uint8Array(2), 0), false, '65536 does not fit 16 bits');
    const signed = compileConversion(s(1), s(4));
    const wide = new Uint8Array(4);
    assert.equal(signed.convert(Buffer.from([0xff]), 0, wide, 0), true);
    assert.equal(Buffer.from(wide).readInt32LE(0), -1, 'sign-extended');
    assert.equal(compileConversion(s(4), u(4)).convert(Buffer.from([0xff, 0xff, 0xff, 0xff]), 0, new Uint8Array(4), 0), false, '-1 does not fit an unsigned field');
  });

  it('converts nested structs and arrays element by element; a kind change stays zero', () => {
    const inner = (extra: boolean) => struct(extra ? 8 : 4, ['x', 0, u(4)], ...(extra ? [['y', 4, u(4)] as [string, number, Layout]] : []));
    const from = struct(20, ['arr', 0, { kind: 'array', size: 12, elem: inner(false), count: 3 }], ['k', 12, u(8)]);
    const to = struct(20, ['arr', 0, { kind: 'array', size: 16, elem: inner(true), count: 2 }], ['k', 16, u(4)]);
    const c = compileConversion(from, to);
    assert.deepEqual(c.changes, ['added arr[0].y (zero)', 'added arr[1].y (zero)', 'arr: 3 → 2 elements (the rest dropped)', 'k: u64 → u32 (converted by value)']);
    const src = Buffer.alloc(20);
    src.writeUInt32LE(1, 0);
    src.writeUInt32LE(2, 4);
    src.writeUInt32LE(3, 8);
    src.writeBigUInt64LE(99n, 12);
    const out = Buffer.alloc(20);
    assert.equal(c.convert(src, 0, out, 0), true);
    assert.deepEqual([out.readUInt32LE(0), out.readUInt32LE(4), out.readUInt32LE(8), out.readUInt32LE(12), out.readUInt32LE(16)], [1, 0, 2, 0, 99]);
    const kind = compileConversion(struct(4, ['v', 0, u(4)]), struct(4, ['v', 0, struct(4, ['w', 0, u(4)])]));
    assert.deepEqual(kind.changes, ['v: u32 → {w@0:u32}:4 cannot be converted (zero)']);
  });

  it('copies an identical layout byte for byte', () => {
    const l = struct(8, ['a', 0, u(4)], ['b', 4, u(2, true)], ['pad', 6, u(2)]);
    const c = compileConversion(l, l);
    assert.equal(c.identical, true);
    assert.deepEqual(c.changes, []);
    const out = new Uint8Array(8);
    assert.equal(c.convert(Buffer.from([1, 2, 3, 4, 5, 6, 7, 8]), 0, out, 0), true);
    assert.deepEqual([...out], [1, 2, 3, 4, 5, 6, 7, 8]);
  });
});
