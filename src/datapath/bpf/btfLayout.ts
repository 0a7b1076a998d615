/**
 * Map layouts read from BTF (btf.ts), for carrying a pinned map's entries
 * over to a new build's layout (mapMigration.ts). Two sources, read alike:
 * the BTF a loaded map carries (Btf.ofId, with the key and value type IDs
 * from the map's info), and an object file's `.maps` section (Btf.ofFile),
 * which says what the new build will ask for before it loads.
 *
 * This is deliberately a view of what is in the kernel and the file, not
 * layout.ts: the old layout is only known from the old map's own BTF.
 */
import { type Btf, BtfError } from './btf.js';

/** One type as the converter needs it: sizes, byte order, members by name. */
export type Layout =
  | { kind: 'int'; size: number; signed: boolean; bigEndian: boolean }
  | { kind: 'struct'; size: number; fields: Field[] }
  | { kind: 'array'; size: number; elem: Layout; count: number }
  /** A union, pointer or anything else: carried as bytes only when it is the same on both sides. */
  | { kind: 'opaque'; size: number; name: string };

export interface Field {
  name: string;
  /** Byte offset in the struct. */
  offset: number;
  layout: Layout;
}

/** A map as a `.maps` section declares it (the fields left out are libbpf's defaults or come from the agent). */
export interface DeclaredMap {
  name: string;
  type: number;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags: number;
  /** LIBBPF_PIN_BY_NAME (1) when libbpf pins it. */
  pinning: number;
  key?: Layout;
  value?: Layout;
}

/**
 * The layout of type `id`. An array's elements inherit a __be* typedef of
 * the array (`bigEndian`); a struct's members start afresh.
 */
export function layoutOf(btf: Btf, id: number, bigEndian = false): Layout {
  const t = btf.resolve(id);
  const be = bigEndian || btf.bigEndian(id);
  switch (t.kind) {
    case 'INT':
      return { kind: 'int', size: t.size!, signed: t.encoding === 'SIGNED', bigEndian: be };
    case 'ENUM':
    case 'ENUM64':
      return { kind: 'int', size: t.size!, signed: false, bigEndian: be };
    case 'ARRAY': {
      const elem = layoutOf(btf, t.type_id!, be);
      return { kind: 'array', size: elem.size * t.nr_elems!, elem, count: t.nr_elems! };
    }
    case 'STRUCT': {
      const fields: Field[] = [];
      for (const m of t.members ?? []) {
        // A bitfield has no byte offset of its own: the struct is carried only when unchanged.
        if ((m.bitfield_size ?? 0) !== 0 || m.bits_offset % 8 !== 0) return { kind: 'opaque', size: t.size!, name: `struct ${t.name} (bitfields)` };
        fields.push({ name: m.name, offset: m.bits_offset / 8, layout: layoutOf(btf, m.type_id) });
      }
      return { kind: 'struct', size: t.size!, fields };
    }
    case 'UNION':
      return { kind: 'opaque', size: t.size!, name: `union ${t.name}` };
    case 'PTR':
      return { kind: 'opaque', size: 8, name: 'pointer' };
    default:
      throw new BtfError(`BTF type ${id} is a ${t.kind}, not a map key or value type`);
  }
}

/** The `.maps` members declared with __uint(x, N), with the DeclaredMap field that holds their N. */
const UINT_FIELDS = new Map<string, 'type' | 'maxEntries' | 'flags' | 'pinning' | 'keySize' | 'valueSize'>([
  ['type', 'type'],
  ['max_entries', 'maxEntries'],
  ['map_flags', 'flags'],
  ['pinning', 'pinning'],
  ['key_size', 'keySize'],
  ['value_size', 'valueSize'],
]);

/** The maps an object's `.maps` section declares. */
export function declaredMaps(btf: Btf): DeclaredMap[] {
  return btf.mapsSection().map(({ name, members }) => {
    const out: DeclaredMap = { name, type: 0, keySize: 0, valueSize: 0, maxEntries: 0, flags: 0, pinning: 0 };
    for (const m of members) {
      const field = UINT_FIELDS.get(m.name);
      if (field) out[field] = btf.uintOf(m.target);
      else if ((m.name === 'key' || m.name === 'value') && m.target !== undefined) {
        const layout = layoutOf(btf, m.target);
        out[m.name] = layout;
        out[m.name === 'key' ? 'keySize' : 'valueSize'] = layout.size;
      }
      // A map of maps: its values are inner maps' fds (4 bytes).
      else if (m.name === 'values') out.valueSize = 4;
    }
    return out;
  });
}

/** A canonical text of a layout: two layouts are the same iff their texts are. */
export function layoutText(l: Layout): string {
  switch (l.kind) {
    case 'int':
      return `${l.signed ? 's' : 'u'}${l.size * 8}${l.bigEndian ? 'be' : ''}`;
    case 'array':
      return `${layoutText(l.elem)}[${l.count}]`;
    case 'opaque':
      return `${l.name}:${l.size}`;
    case 'struct':
      return `{${l.fields.map((f) => `${f.name}@${f.offset}:${layoutText(f.layout)}`).join(',')}}:${l.size}`;
  }
}
