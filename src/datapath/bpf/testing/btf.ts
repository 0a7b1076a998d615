/**
 * The BTF of a built BPF object as `bpftool -j btf dump file` reports it:
 * struct sizes and member offsets, and the key and value types of the
 * maps the object defines (its `.maps` section), for layout.test.ts.
 */
import { spawnSync } from 'node:child_process';

interface BtfMember {
  name: string;
  type_id: number;
  bits_offset: number;
}

interface BtfType {
  id: number;
  kind: string;
  name: string;
  size?: number;
  type_id?: number;
  nr_elems?: number;
  members?: BtfMember[];
  vars?: Array<{ type_id: number; offset: number; size: number }>;
}

export interface StructMember {
  name: string;
  /** Byte offset in the struct. */
  offset: number;
  size: number;
}

export interface StructLayout {
  name: string;
  size: number;
  members: StructMember[];
}

export interface MapDefinition {
  name: string;
  /** BTF-declared key and value types (absent for maps without them, e.g. a ring buffer). */
  key?: { name: string; size: number };
  value?: { name: string; size: number };
}

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
    if (!t) throw new Error(`BTF type ${id} missing`);
    return t;
  }

  /** Through typedefs and qualifiers. */
  #resolve(id: number): BtfType {
    let t = this.#type(id);
    while (['TYPEDEF', 'CONST', 'VOLATILE', 'RESTRICT', 'TYPE_TAG'].includes(t.kind)) t = this.#type(t.type_id!);
    return t;
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
        throw new Error(`no size for BTF kind ${t.kind}`);
    }
  }

  /** A named struct's layout, or undefined when the object's BTF lacks it. */
  struct(name: string): StructLayout | undefined {
    const t = [...this.#byId.values()].find((x) => x.kind === 'STRUCT' && x.name === name);
    if (!t) return undefined;
    return {
      name,
      size: t.size!,
      members: (t.members ?? []).map((m) => ({ name: m.name, offset: m.bits_offset / 8, size: this.sizeOf(m.type_id) })),
    };
  }

  /** Every map in the `.maps` section with its declared key and value types. */
  maps(): MapDefinition[] {
    const sec = [...this.#byId.values()].find((x) => x.kind === 'DATASEC' && x.name === '.maps');
    if (!sec) return [];
    return (sec.vars ?? []).map((v) => {
      const variable = this.#type(v.type_id);
      const def = this.#resolve(variable.type_id!);
      const out: MapDefinition = { name: variable.name };
      for (const m of def.members ?? []) {
        if (m.name !== 'key' && m.name !== 'value') continue;
        const ptr = this.#resolve(m.type_id);
        const target = this.#resolve(ptr.type_id!);
        out[m.name] = { name: target.name, size: this.sizeOf(ptr.type_id!) };
      }
      return out;
    });
  }
}
