/**
 * Converting a map entry from one build's layout to another's, field by field
 * by name, both layouts read from BTF (btfLayout.ts):
 *   - a field in both with the same type is copied as is;
 *   - an integer field whose size, sign or byte order changed is converted by
 *     value; a value the new field cannot hold makes the whole entry
 *     unconvertible (the caller drops it and counts it: a conntrack entry
 *     with a wrong value is worse than none, the flow is tracked anew);
 *   - a field only the new layout has stays zero (its default);
 *   - a field only the old layout has is dropped;
 *   - a field whose kind changed (an integer became a struct, a union of
 *     another size) cannot be carried and stays zero; the plan says so.
 * Structs and arrays convert member by member and element by element.
 */
import { type Layout, layoutText } from './btfLayout.js';

type Op =
  | { kind: 'copy'; from: number; to: number; len: number }
  | { kind: 'int'; from: number; fromSize: number; fromBe: boolean; signed: boolean; to: number; toSize: number; toBe: boolean; toSigned: boolean };

export interface Conversion {
  /** Old and new layouts are the same: entries are copied byte for byte. */
  readonly identical: boolean;
  readonly fromSize: number;
  readonly toSize: number;
  /** What differs, as phrases (`added backend_gen (zero)`, `removed pad2`, `port: u16be → u32be`). */
  readonly changes: readonly string[];
  /**
   * Writes the converted entry at `out[outOffset..]` (which must be zeroed)
   * from `src[srcOffset..]`; false when a value does not fit its new field.
   */
  convert(src: Uint8Array, srcOffset: number, out: Uint8Array, outOffset: number): boolean;
}

/** The conversion of one layout (a map's key or value) into another. */
export function compileConversion(from: Layout, to: Layout): Conversion {
  const ops: Op[] = [];
  const changes: string[] = [];
  compile(from, to, 0, 0, '', ops, changes);
  return new CompiledConversion(layoutText(from) === layoutText(to), from.size, to.size, changes, coalesce(ops));
}

/** Adjacent copies that stay adjacent become one (a struct with one field added is two copies, not one per field). */
function coalesce(ops: readonly Op[]): Op[] {
  const out: Op[] = [];
  for (const op of ops) {
    const last = out[out.length - 1];
    if (op.kind === 'copy' && last?.kind === 'copy' && last.from + last.len === op.from && last.to + last.len === op.to) {
      out[out.length - 1] = { ...last, len: last.len + op.len };
      continue;
    }
    out.push(op);
  }
  return out;
}

function compile(from: Layout, to: Layout, fo: number, to_: number, path: string, ops: Op[], changes: string[]): void {
  const where = path === '' ? 'the whole' : path;
  if (layoutText(from) === layoutText(to)) {
    if (to.size > 0) ops.push({ kind: 'copy', from: fo, to: to_, len: to.size });
    return;
  }
  if (from.kind === 'int' && to.kind === 'int') {
    ops.push({ kind: 'int', from: fo, fromSize: from.size, fromBe: from.bigEndian, signed: from.signed, to: to_, toSize: to.size, toBe: to.bigEndian, toSigned: to.signed });
    changes.push(`${where}: ${layoutText(from)} → ${layoutText(to)} (converted by value)`);
    return;
  }
  if (from.kind === 'struct' && to.kind === 'struct') {
    const prefix = path === '' ? '' : `${path}.`;
    for (const nf of to.fields) {
      const of = nf.name === '' ? undefined : from.fields.find((f) => f.name === nf.name);
      if (!of) {
        changes.push(`added ${prefix}${nf.name || '(anonymous)'} (zero)`);
        continue;
      }
      compile(of.layout, nf.layout, fo + of.offset, to_ + nf.offset, `${prefix}${nf.name}`, ops, changes);
    }
    for (const of of from.fields) if (of.name === '' || !to.fields.some((f) => f.name === of.name)) changes.push(`removed ${prefix}${of.name || '(anonymous)'}`);
    return;
  }
  if (from.kind === 'array' && to.kind === 'array') {
    const n = Math.min(from.count, to.count);
    for (let i = 0; i < n; i++) compile(from.elem, to.elem, fo + i * from.elem.size, to_ + i * to.elem.size, `${path}[${i}]`, ops, changes);
    if (from.count !== to.count) changes.push(`${where}: ${from.count} → ${to.count} elements (${from.count > to.count ? 'the rest dropped' : 'new ones zero'})`);
    return;
  }
  changes.push(`${where}: ${layoutText(from)} → ${layoutText(to)} cannot be converted (zero)`);
}

function readInt(b: Uint8Array, off: number, size: number, be: boolean, signed: boolean): bigint {
  let v = 0n;
  for (let i = 0; i < size; i++) v = (v << 8n) | BigInt(b[off + (be ? i : size - 1 - i)]!);
  if (signed && size > 0 && (v >> BigInt(size * 8 - 1)) === 1n) v -= 1n << BigInt(size * 8);
  return v;
}

function writeInt(b: Uint8Array, off: number, size: number, be: boolean, v: bigint): void {
  let u = v < 0n ? v + (1n << BigInt(size * 8)) : v;
  for (let i = 0; i < size; i++) {
    b[off + (be ? size - 1 - i : i)] = Number(u & 0xffn);
    u >>= 8n;
  }
}

function fits(v: bigint, size: number, signed: boolean): boolean {
  const bits = BigInt(size * 8);
  return signed ? v >= -(1n << (bits - 1n)) && v < 1n << (bits - 1n) : v >= 0n && v < 1n << bits;
}

class CompiledConversion implements Conversion {
  constructor(
    readonly identical: boolean,
    readonly fromSize: number,
    readonly toSize: number,
    readonly changes: readonly string[],
    private readonly ops: readonly Op[],
  ) {}

  convert(src: Uint8Array, srcOffset: number, out: Uint8Array, outOffset: number): boolean {
    for (const op of this.ops) {
      if (op.kind === 'copy') {
        out.set(src.subarray(srcOffset + op.from, srcOffset + op.from + op.len), outOffset + op.to);
        continue;
      }
      const v = readInt(src, srcOffset + op.from, op.fromSize, op.fromBe, op.signed);
      if (!fits(v, op.toSize, op.toSigned)) return false;
      writeInt(out, outOffset + op.to, op.toSize, op.toBe, v);
    }
    return true;
  }
}
