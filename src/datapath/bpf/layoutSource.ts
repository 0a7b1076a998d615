/**
 * Renders src/datapath/bpf/generated/layouts.ts from the built objects'
 * BTF, as bpf2go does for Go: the structs of every pinned map's key and
 * value, and the records the programs hand over outside maps (ring buffer
 * events, the GC program's global data), with every member's offset and C
 * type. The C struct is the one definition; `make build` runs this after
 * compiling the objects (scripts/gen-layouts.mjs) and compiles TypeScript
 * again when the text changed.
 */
import { isDeepStrictEqual } from 'node:util';
import { BtfLayoutError, type CType, type MapDefinition, type MapSlot, type Btf, type StructLayout } from './btf.js';
import { MapName } from './constants.js';

/** Structs that reach TypeScript other than as a map's key or value. */
export const RECORD_STRUCTS = [
  /** A `tendril_events` ring buffer record. */
  'tendril_event',
  /** bpf_gc.o's global data: a GC run's input and results. */
  'gc_run',
] as const;

/** BPF_MAP_TYPE_* numbers of the maps tendril defines, by the names the docs use. */
const MAP_TYPES: Record<number, string> = {
  1: 'hash',
  2: 'array',
  3: 'program array',
  5: 'per-CPU hash',
  6: 'per-CPU array',
  9: 'LRU hash',
  10: 'LRU per-CPU hash',
  11: 'LPM trie',
  12: 'array of maps',
  13: 'hash of maps',
  27: 'ring buffer',
};

export interface NamedBtf {
  /** The object's file name, for messages (bpf_lxc.o). */
  object: string;
  btf: Btf;
}

/** `endpoint_id` → `endpointId`; a name that would not read back the same (`ip_4`, `srcIP`) is refused. */
export function camelCase(cName: string): string {
  const out = cName.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
  if (snakeCase(out) !== cName) throw new BtfLayoutError(`${cName}: only lower-case snake_case names map to TypeScript names and back`);
  return out;
}

/** `endpointId` → `endpoint_id`: the C name of a generated member. */
export function snakeCase(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

export function layoutName(struct: string): string {
  return `${camelCase(struct)}Layout`;
}

function intCodec(t: Extract<CType, { kind: 'int' }>, where: string): string {
  const name = t.bigEndian ? `u${t.size * 8}be` : `${t.signed ? 'i' : 'u'}${t.size * 8}`;
  if (!['u8', 'i8', 'u16', 'u16be', 'u32', 'u32be', 'i32', 'u64', 'u64be'].includes(name)) throw new BtfLayoutError(`${where}: no codec for a ${t.signed ? 'signed' : 'unsigned'} ${t.size}-byte integer${t.bigEndian ? ' in network order' : ''}`);
  return `codec.${name}`;
}

function codecSource(t: CType, where: string): string {
  switch (t.kind) {
    case 'int':
      return intCodec(t, where);
    case 'struct':
      return layoutName(t.name);
    case 'array':
      if (t.element.kind === 'int' && t.element.size === 1 && !t.element.signed) return `codec.bytes(${t.length})`;
      return `codec.array(${codecSource(t.element, `${where}[]`)}, ${t.length})`;
  }
}

function cTypeText(t: CType): string {
  switch (t.kind) {
    case 'int':
      return `${t.bigEndian ? '__be' : t.signed ? '__s' : '__u'}${t.size * 8}`;
    case 'struct':
      return `struct ${t.name}`;
    case 'array':
      return `${cTypeText(t.element)}[${t.length}]`;
  }
}

/** The one definition of each struct across the objects: where two objects have it, they must agree. */
function structsOf(objects: NamedBtf[], roots: string[]): StructLayout[] {
  const found = new Map<string, { layout: StructLayout; object: string }>();
  const ordered: StructLayout[] = [];
  const visit = (name: string, from: string): void => {
    if (found.has(name)) return;
    let layout: { layout: StructLayout; object: string } | undefined;
    for (const o of objects) {
      const l = o.btf.struct(name);
      if (!l) continue;
      if (!layout) layout = { layout: l, object: o.object };
      else if (!isDeepStrictEqual(l, layout.layout)) throw new BtfLayoutError(`struct ${name} differs between ${layout.object} and ${o.object}`);
    }
    if (!layout) throw new BtfLayoutError(`struct ${name} (${from}) is in no object's BTF`);
    found.set(name, layout);
    for (const m of layout.layout.members) {
      let t = m.type;
      while (t.kind === 'array') t = t.element;
      if (t.kind === 'struct') visit(t.name, `struct ${name}.${m.name}`);
    }
    ordered.push(layout.layout);
  };
  for (const r of roots) visit(r, 'a root');
  return ordered;
}

function mapsOf(objects: NamedBtf[]): MapDefinition[] {
  const wanted = new Set<string>(Object.values(MapName));
  const out = new Map<string, { def: MapDefinition; object: string }>();
  for (const o of objects) {
    for (const def of o.btf.maps()) {
      if (!wanted.has(def.name)) continue;
      const seen = out.get(def.name);
      if (!seen) out.set(def.name, { def, object: o.object });
      else if (!isDeepStrictEqual(seen.def, def)) throw new BtfLayoutError(`map ${def.name} is defined differently in ${seen.object} and ${o.object}`);
    }
  }
  const missing = [...wanted].filter((n) => !out.has(n));
  if (missing.length > 0) throw new BtfLayoutError(`no object defines ${missing.join(', ')}`);
  return Object.values(MapName).map((n) => out.get(n)!.def);
}

function slotSource(slot: MapSlot | undefined): string {
  if (!slot) return 'undefined';
  return `{ cType: '${slot.struct ? `struct ${slot.name}` : slot.name}', size: ${slot.size} }`;
}

/** The text of generated/layouts.ts for these objects. */
export function renderLayouts(given: NamedBtf[]): string {
  const objects = [...given].sort((a, b) => a.object.localeCompare(b.object));
  const maps = mapsOf(objects);
  const roots = [...maps.flatMap((m) => [m.key, m.value]).flatMap((s) => (s?.struct ? [s.name] : [])), ...RECORD_STRUCTS].sort();
  const structs = structsOf(objects, [...new Set(roots)]);
  const lines = [
    `// Generated from the BTF of ${objects.map((o) => o.object).join(', ')} by scripts/gen-layouts.mjs`,
    '// (src/datapath/bpf/layoutSource.ts); do not edit. The structs are bpf/lib/*.h\'s:',
    '// `make build` compiles the objects, then writes this file again.',
    "import { codec } from '../../kernel/bpf/index.js';",
    "import { defineStruct } from '../btfStruct.js';",
    '',
  ];
  for (const s of structs) {
    lines.push(`/** struct ${s.name}: ${s.size} bytes. */`, `export const ${layoutName(s.name)} = defineStruct('${s.name}', ${s.size}, ${s.align}, {`);
    for (const m of s.members) {
      const where = `struct ${s.name}.${m.name}`;
      const c = m.name.startsWith('pad') ? `codec.pad(${m.size})` : codecSource(m.type, where);
      lines.push(`  ${camelCase(m.name)}: { offset: ${m.offset}, codec: ${c} }, // ${cTypeText(m.type)} ${m.name}`);
    }
    lines.push('});', '');
  }
  lines.push('/** Every struct above by its C name. */', 'export const structLayouts = {');
  for (const s of [...structs].sort((a, b) => a.name.localeCompare(b.name))) lines.push(`  ${s.name}: ${layoutName(s.name)},`);
  lines.push('} as const;', '');
  lines.push('/** The pinned maps (MapName) as the objects define them: type, key and value. */', 'export const mapLayouts = {');
  for (const m of maps) {
    const type = MAP_TYPES[m.type];
    if (!type) throw new BtfLayoutError(`map ${m.name}: BPF map type ${m.type} has no name here`);
    lines.push(`  ${m.name}: { type: '${type}', key: ${slotSource(m.key)}, value: ${slotSource(m.value)} },`);
  }
  lines.push('} as const;', '');
  return lines.join('\n');
}
