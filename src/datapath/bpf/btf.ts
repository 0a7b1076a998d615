/**
 * BTF as `bpftool -j btf dump` reports it, read in one place: a built
 * object's (`btf dump file`) or a loaded map's (`btf dump id`). The Btf
 * class owns the reading: types by ID, typedefs and qualifiers resolved,
 * integer encoding, network byte order (which only a __be16/__be32/__be64
 * typedef says), struct members and the maps a `.maps` section defines.
 *
 * Two views are built on it. Here, the structs with each member's C type and
 * the maps with their key and value types: the layouts of
 * src/datapath/bpf/generated/layouts.ts are rendered from them
 * (layoutSource.ts), and layout.test.ts holds the codecs to the objects with
 * them. btfLayout.ts reads the same types as the converter-shaped layouts a
 * map migration compares (mapMigration.ts).
 */
import { spawnSync } from 'node:child_process';

interface BtfMember {
  name: string;
  type_id: number;
  bits_offset: number;
  bitfield_size?: number;
}

/** One type as bpftool prints it (fields by kind). */
export interface BtfType {
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

/** A map of a `.maps` section: each member of its definition with the type ID the member points to. */
export interface MapsSectionEntry {
  name: string;
  /**
   * In declaration order, with the type ID each points to: libbpf's
   * __uint(x, N) is a pointer to an array of N, __type(x, T) a pointer to T.
   * A member that is no pointer (a map of maps' __array(values, ...)) has no target.
   */
  members: Array<{ name: string; target: number | undefined }>;
}

/** A member's C type, as far as a fixed-size codec needs it. */
export type CType =
  | {
      kind: 'int';
      size: number;
      signed: boolean;
      /** Declared through a __be16/__be32/__be64 typedef: network byte order. */
      bigEndian: boolean;
    }
  | { kind: 'struct'; name: string; size: number }
  | { kind: 'array'; element: CType; length: number; size: number };

export interface StructMember {
  name: string;
  /** Byte offset in the struct. */
  offset: number;
  size: number;
  type: CType;
}

export interface StructLayout {
  name: string;
  size: number;
  /** The largest alignment of a member (clang's natural alignment for the BPF target). */
  align: number;
  members: StructMember[];
}

/** A map's key or value type: a named struct, or a scalar (then `name` is its C type, e.g. `__u32`). */
export interface MapSlot {
  name: string;
  size: number;
  struct: boolean;
}

export interface MapDefinition {
  name: string;
  /** BPF_MAP_TYPE_* number. */
  type: number;
  /** BTF-declared key and value types (absent for maps without them, e.g. a ring buffer). */
  key?: MapSlot;
  value?: MapSlot;
}

/** BTF could not be read, or holds a type that is not what its reader can describe. */
export class BtfError extends Error {
  override readonly name: string = 'BtfError';
}

/** The BTF of an object is not what the layouts can describe (a bitfield, a union member, an unknown kind). */
export class BtfLayoutError extends BtfError {
  override readonly name = 'BtfLayoutError';
}

/** bpftool answers in ms; one that hangs fails the start instead of stalling it. */
export const BPFTOOL_TIMEOUT_MS = 30_000;

const QUALIFIERS = new Set(['CONST', 'VOLATILE', 'RESTRICT', 'TYPE_TAG']);

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

  type(id: number): BtfType {
    const t = this.#byId.get(id);
    if (!t) throw new BtfError(`BTF type ${id} is missing`);
    return t;
  }

  /** The type `id` names, through typedefs and qualifiers. */
  resolve(id: number): BtfType {
    let t = this.type(id);
    while (t.kind === 'TYPEDEF' || QUALIFIERS.has(t.kind)) t = this.type(t.type_id!);
    return t;
  }

  /** Whether a __be16/__be32/__be64 typedef is on the way from `id` to the type it names. */
  bigEndian(id: number): boolean {
    for (let t = this.type(id); ; t = this.type(t.type_id!)) {
      if (t.kind === 'TYPEDEF' && BIG_ENDIAN_TYPEDEFS.has(t.name)) return true;
      if (t.kind !== 'TYPEDEF' && !QUALIFIERS.has(t.kind)) return false;
    }
  }

  /** The first typedef name on the way to the type (`__be32`, `__u8`), or the type's own name. */
  declaredName(id: number): string {
    let t = this.type(id);
    while (QUALIFIERS.has(t.kind)) t = this.type(t.type_id!);
    return t.name || this.resolve(id).name;
  }

  sizeOf(id: number): number {
    const t = this.resolve(id);
    switch (t.kind) {
      case 'INT':
      case 'STRUCT':
      case 'UNION':
      case 'ENUM':
      case 'ENUM64':
        return t.size!;
      case 'PTR':
        return 8;
      case 'ARRAY':
        return t.nr_elems! * this.sizeOf(t.type_id!);
      default:
        throw new BtfError(`no size for BTF kind ${t.kind}`);
    }
  }

  /** The N of a `.maps` member's __uint(x, N) (the length of the array it points to); 0 for any other target. */
  uintOf(target: number | undefined): number {
    const t = target === undefined ? undefined : this.resolve(target);
    return t?.kind === 'ARRAY' ? t.nr_elems! : 0;
  }

  /** Every map in the `.maps` section, as its definition's members. */
  mapsSection(): MapsSectionEntry[] {
    const sec = [...this.#byId.values()].find((t) => t.kind === 'DATASEC' && t.name === '.maps');
    if (!sec) return [];
    return (sec.vars ?? []).map((v) => {
      const variable = this.type(v.type_id);
      const def = this.resolve(variable.type_id!);
      const members = (def.members ?? []).map((m) => {
        const t = this.resolve(m.type_id);
        return { name: m.name, target: t.kind === 'PTR' ? t.type_id : undefined };
      });
      return { name: variable.name, members };
    });
  }

  cType(id: number, where: string): CType {
    const t = this.resolve(id);
    switch (t.kind) {
      case 'INT':
        return { kind: 'int', size: t.size!, signed: t.encoding === 'SIGNED', bigEndian: this.bigEndian(id) };
      case 'STRUCT':
        if (!t.name) throw new BtfLayoutError(`${where}: an anonymous struct has no layout of its own to generate`);
        return { kind: 'struct', name: t.name, size: t.size! };
      case 'ARRAY':
        return { kind: 'array', element: this.cType(t.type_id!, `${where}[]`), length: t.nr_elems!, size: this.sizeOf(id) };
      default:
        throw new BtfLayoutError(`${where}: a ${t.kind.toLowerCase()} member has no fixed-size codec`);
    }
  }

  #alignOf(type: CType): number {
    switch (type.kind) {
      case 'int':
        return type.size;
      case 'array':
        return this.#alignOf(type.element);
      case 'struct':
        return this.struct(type.name)!.align;
    }
  }

  /** Every named struct in the object. */
  structNames(): string[] {
    return [...this.#byId.values()].filter((t) => t.kind === 'STRUCT' && t.name).map((t) => t.name);
  }

  /** A named struct's layout, or undefined when the object's BTF lacks it. */
  struct(name: string): StructLayout | undefined {
    const t = [...this.#byId.values()].find((x) => x.kind === 'STRUCT' && x.name === name);
    if (!t) return undefined;
    const members = (t.members ?? []).map((m): StructMember => {
      if (m.bitfield_size) throw new BtfLayoutError(`struct ${name}.${m.name} is a bitfield`);
      if (m.bits_offset % 8 !== 0) throw new BtfLayoutError(`struct ${name}.${m.name} does not start on a byte`);
      return { name: m.name, offset: m.bits_offset / 8, size: this.sizeOf(m.type_id), type: this.cType(m.type_id, `struct ${name}.${m.name}`) };
    });
    return { name, size: t.size!, align: Math.max(1, ...members.map((m) => this.#alignOf(m.type))), members };
  }

  /** Every map in the `.maps` section with its type and declared key and value types. */
  maps(): MapDefinition[] {
    return this.mapsSection().map(({ name, members }) => {
      const out: MapDefinition = { name, type: 0 };
      for (const m of members) {
        if (m.name === 'type') out.type = this.uintOf(m.target);
        if ((m.name !== 'key' && m.name !== 'value') || m.target === undefined) continue;
        const target = this.resolve(m.target);
        out[m.name] = { name: target.kind === 'STRUCT' ? target.name : this.declaredName(m.target), size: this.sizeOf(m.target), struct: target.kind === 'STRUCT' };
      }
      return out;
    });
  }
}
