/**
 * Codecs over the struct layouts generated from the objects' BTF
 * (generated/layouts.ts): each member at the offset clang gave it, never an
 * offset typed by hand. A generated struct is itself a codec of its raw
 * members (host-order integers, network-order ones for __be types, byte
 * arrays); `structCodec` lets layout.ts read a member as what it means (an
 * address, a MAC) with a codec of the member's exact size.
 */
import { type Codec, codec, type CodecValue } from '../kernel/bpf/index.js';

export interface Field<T> {
  readonly offset: number;
  readonly codec: Codec<T>;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a bound only: each generated field has its codec's own type
type AnyField = Field<any>;
type Fields = Record<string, AnyField>;
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a bound only, as above
type AnyCodec = Codec<any>;

type FieldValue<F> = F extends Field<infer T> ? T : never;

/** A member's codec: the override's, else the generated one. */
type MemberCodec<F extends Fields, O, K extends keyof F> = K extends keyof O ? O[K] : F[K]['codec'];

/** A struct's value: every member but padding (codec.pad, members named pad*). */
export type StructValue<F extends Fields, O = object> = {
  [K in keyof F as MemberCodec<F, O, K> extends Codec<undefined> ? never : K]: K extends keyof O ? CodecValue<O[K]> : FieldValue<F[K]>;
};

/** A struct from the objects' BTF: its C name, size, members by offset, and the codec of its raw members. */
export interface BtfStruct<F extends Fields> extends Codec<StructValue<F>> {
  readonly cName: string;
  readonly fields: F;
}

/** The layout is read from BTF, so the alignment is clang's: no padding is computed here. */
function fieldCodec<V>(cName: string, size: number, align: number, fields: Array<[string, AnyField]>): Codec<V> {
  for (const [name, f] of fields) {
    if (f.offset < 0 || f.offset + f.codec.size > size) throw new RangeError(`struct ${cName}.${name}: bytes ${f.offset}..${f.offset + f.codec.size - 1} are outside its ${size} bytes`);
  }
  return codec.placedStruct<V>(size, align, fields.map(([name, f]) => ({ name, codec: f.codec, offset: f.offset })));
}

/** Used by generated/layouts.ts only. */
export function defineStruct<F extends Fields>(cName: string, size: number, align: number, fields: F): BtfStruct<F> {
  return { ...fieldCodec<StructValue<F>>(cName, size, align, Object.entries(fields)), cName, fields };
}

/**
 * A codec of the struct with some members read as what they mean. Each
 * override must have its member's size (an address over a __be32, a MAC
 * over __u8[6]); one for a member the struct does not have is a type error,
 * and either mistake throws when the module loads.
 */
export function structCodec<F extends Fields, O extends { readonly [K in keyof F]?: AnyCodec }>(
  s: BtfStruct<F>,
  overrides: O & Record<Exclude<keyof O, keyof F>, never>,
): Codec<StructValue<F, O>> {
  const fields = new Map<string, AnyField>(Object.entries(s.fields));
  for (const [name, c] of Object.entries(overrides as Record<string, AnyCodec>)) {
    const f = fields.get(name);
    if (!f) throw new RangeError(`struct ${s.cName} has no member ${name}`);
    if (c.size !== f.codec.size) throw new RangeError(`struct ${s.cName}.${name} is ${f.codec.size} bytes, its codec ${c.size}`);
    fields.set(name, { offset: f.offset, codec: c });
  }
  return fieldCodec(s.cName, s.size, s.align, [...fields]);
}
