/**
 * Map layouts read from BTF, for carrying a pinned map's entries over to a
 * new build's layout (mapMigration.ts). Two sources, read alike: the BTF a
 * loaded map carries (`bpftool btf dump id`, with the key and value type IDs
 * from the map's info), and an object file's `.maps` section (`bpftool btf
 * dump file`), which says what the new build will ask for before it loads.
 *
 * This is deliberately a reader of what is in the kernel and the file, not
 * layout.ts: the old layout is only known from the old map's own BTF.
 */
import { spawnSync } from 'node:child_process';

interface BtfMember {
  name: string;
  type_id: number;
  bits_offset: number;
  bitfield_size?: number;
}

interface BtfType {
  id: number;
  kind: string;
  name: string;
  size?: number;
  type_id?: number;
  nr_elems?: number;
  encoding?: string;
  members?: BtfMember[];
  vars?: Array<{ type_id: number; offset: number; size: number }>;
}

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

export class BtfError extends Error {
  override readonly name = 'BtfError';
}

/** bpftool answers in ms; one that hangs fails the start instead of stalling it. */
export const BPFTOOL_TIMEOUT_MS = 30_000;

/** Typedef names that say an integer is in network byte order (the BTF of an int has no byte order). */
const BIG_ENDIAN_TYPEDEFS = new Set(['__be16', '__be32', '__be64']);

/** One BTF object's types by ID. */
export class Btf {
  readonly #byId = new Map<number, BtfType>();

  private constructor(types: BtfType[]) {
    for (const t of types) this.#byId.set(t.id, t);
  }

  /** The BTF object with this kernel ID (a map's info.btfId). */
  static ofId(id: number): Btf {
    return Btf.#dump(['btf', 'dump', 'id', String(id)], `BTF id ${id}`);
  }

  /** The BTF of a BPF ELF object. */
  static ofFile(path: string): Btf {
    return Btf.#dump(['btf', 'dump', 'file', path], path);
  }

  static #dump(args: string[], what: string): Btf {
    // Arguments are a number or a path of ours, passed as an argv array (never through a shell).
    const r = spawnSync('bpftool', ['-j', ...args], { encoding: 'utf8', maxBuffer: 64 << 20, timeout: BPFTOOL_TIMEOUT_MS });
    if (r.error) throw new BtfError(`reading ${what} with bpftool failed: ${r.error.message}`);
    if (r.status !== 0) throw new BtfError(`reading ${what} with bpftool failed (exit ${r.status}): ${r.stderr.trim()}`);
    return new Btf((JSON.parse(r.stdout) as { types: BtfType[] }).types);
  }

  #type(id: number): BtfType {
    const t = this.#byId.get(id);
    if (!t) throw new BtfError(`BTF type ${id} is missing`);
    return t;
  }

  /** The layout of type `id`, through typedefs and qualifiers. */
  layout(id: number, bigEndian = false): Layout {
    const t = this.#type(id);
    switch (t.kind) {
      case 'TYPEDEF':
        return this.layout(t.type_id!, bigEndian || BIG_ENDIAN_TYPEDEFS.has(t.name));
      case 'CONST':
      case 'VOLATILE':
      case 'RESTRICT':
      case 'TYPE_TAG':
        return this.layout(t.type_id!, bigEndian);
      case 'INT':
        return { kind: 'int', size: t.size!, signed: t.encoding === 'SIGNED', bigEndian };
      case 'ENUM':
      case 'ENUM64':
        return { kind: 'int', size: t.size!, signed: false, bigEndian };
      case 'ARRAY': {
        const elem = this.layout(t.type_id!, bigEndian);
        return { kind: 'array', size: elem.size * t.nr_elems!, elem, count: t.nr_elems! };
      }
      case 'STRUCT': {
        const fields: Field[] = [];
        for (const m of t.members ?? []) {
          // A bitfield has no byte offset of its own: the struct is carried only when unchanged.
          if ((m.bitfield_size ?? 0) !== 0 || m.bits_offset % 8 !== 0) return { kind: 'opaque', size: t.size!, name: `struct ${t.name} (bitfields)` };
          fields.push({ name: m.name, offset: m.bits_offset / 8, layout: this.layout(m.type_id) });
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

  /** The maps an object's `.maps` section declares. */
  declaredMaps(): DeclaredMap[] {
    const sec = [...this.#byId.values()].find((t) => t.kind === 'DATASEC' && t.name === '.maps');
    if (!sec) return [];
    return (sec.vars ?? []).map((v) => {
      const variable = this.#type(v.type_id);
      const def = this.#type(variable.type_id!);
      const out: DeclaredMap = { name: variable.name, type: 0, keySize: 0, valueSize: 0, maxEntries: 0, flags: 0, pinning: 0 };
      for (const m of def.members ?? []) {
        const ptr = this.#type(m.type_id);
        const target = ptr.type_id === undefined ? undefined : this.#type(ptr.type_id);
        // __uint(x, N) is a pointer to an array of N; __type(x, T) a pointer to T.
        const n = target?.kind === 'ARRAY' ? target.nr_elems! : 0;
        switch (m.name) {
          case 'type':
            out.type = n;
            break;
          case 'max_entries':
            out.maxEntries = n;
            break;
          case 'map_flags':
            out.flags = n;
            break;
          case 'pinning':
            out.pinning = n;
            break;
          case 'key_size':
            out.keySize = n;
            break;
          case 'value_size':
            out.valueSize = n;
            break;
          case 'key':
            out.key = this.layout(ptr.type_id!);
            out.keySize = out.key.size;
            break;
          case 'value':
            out.value = this.layout(ptr.type_id!);
            out.valueSize = out.value.size;
            break;
          case 'values':
            // A map of maps: its values are inner maps' fds (4 bytes).
            out.valueSize = 4;
            break;
        }
      }
      return out;
    });
  }
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
