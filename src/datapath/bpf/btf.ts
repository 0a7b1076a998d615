/**
 * The BTF of a built BPF object as `bpftool -j btf dump file` reports it:
 * structs with each member's offset, size and C type, and the maps the
 * object defines (its `.maps` section) with their types and key and value
 * types. The layouts of src/datapath/bpf/generated/layouts.ts are rendered
 * from it (layoutSource.ts), and layout.test.ts reads it to hold the codecs
 * to the objects.
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

/** The BTF of an object is not what the layouts can describe (a bitfield, a union member, an unknown kind). */
export class BtfLayoutError extends Error {
  override readonly name = 'BtfLayoutError';
}

const QUALIFIERS = ['CONST', 'VOLATILE', 'RESTRICT', 'TYPE_TAG'];

export class ObjectBtf {
  readonly #byId = new Map<number, BtfType>();

  private constructor(types: BtfType[]) {
    for (const t of types) this.#byId.set(t.id, t);
  }

  static load(objectPath: string): ObjectBtf {
    const r = spawnSync('bpftool', ['-j', 'btf', 'dump', 'file', objectPath], { encoding: 'utf8', maxBuffer: 64 << 20 });
    if (r.error) throw r.error;
    if (r.status !== 0) throw new Error(`bpftool btf dump ${objectPath} exited ${r.status}: ${r.stderr}`);
    return new ObjectBtf((JSON.parse(r.stdout) as { types: BtfType[] }).types);
  }

  #type(id: number): BtfType {
    const t = this.#byId.get(id);
    if (!t) throw new BtfLayoutError(`BTF type ${id} missing`);
    return t;
  }

  /** Through typedefs and qualifiers. */
  #resolve(id: number): BtfType {
    let t = this.#type(id);
    while (t.kind === 'TYPEDEF' || QUALIFIERS.includes(t.kind)) t = this.#type(t.type_id!);
    return t;
  }

  /** The first typedef name on the way to the type (`__be32`, `__u8`), or the type's own name. */
  #declaredName(id: number): string {
    let t = this.#type(id);
    while (QUALIFIERS.includes(t.kind)) t = this.#type(t.type_id!);
    return t.name || this.#resolve(id).name;
  }

  #bigEndian(id: number): boolean {
    for (let t = this.#type(id); ; t = this.#type(t.type_id!)) {
      if (t.kind === 'TYPEDEF' && /^__be(16|32|64)$/.test(t.name)) return true;
      if (t.kind !== 'TYPEDEF' && !QUALIFIERS.includes(t.kind)) return false;
    }
  }

  sizeOf(id: number): number {
    const t = this.#resolve(id);
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
        throw new BtfLayoutError(`no size for BTF kind ${t.kind}`);
    }
  }

  cType(id: number, where: string): CType {
    const t = this.#resolve(id);
    switch (t.kind) {
      case 'INT':
        return { kind: 'int', size: t.size!, signed: t.encoding === 'SIGNED', bigEndian: this.#bigEndian(id) };
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
    const sec = [...this.#byId.values()].find((x) => x.kind === 'DATASEC' && x.name === '.maps');
    if (!sec) return [];
    return (sec.vars ?? []).map((v) => {
      const variable = this.#type(v.type_id);
      const def = this.#resolve(variable.type_id!);
      const out: MapDefinition = { name: variable.name, type: 0 };
      for (const m of def.members ?? []) {
        // libbpf's __uint(type, N) / __type(key, T): `int (*type)[N]`, `T *key`.
        const ptr = this.#resolve(m.type_id);
        if (m.name === 'type') out.type = this.#resolve(ptr.type_id!).nr_elems!;
        if (m.name !== 'key' && m.name !== 'value') continue;
        const target = this.#resolve(ptr.type_id!);
        out[m.name] = { name: target.kind === 'STRUCT' ? target.name : this.#declaredName(ptr.type_id!), size: this.sizeOf(ptr.type_id!), struct: target.kind === 'STRUCT' };
      }
      return out;
    });
  }
}
