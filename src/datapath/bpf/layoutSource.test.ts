/**
 * generated/layouts.ts against the built objects: rendered again from
 * their BTF, it is the committed text. A struct edited in bpf/lib/*.h and
 * compiled without `make build` writing the layouts again fails here.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseIp } from '../../netip/index.js';
import { codec } from '../kernel/bpf/index.js';
import { Btf } from './btf.js';
import { defineStruct, structCodec } from './btfStruct.js';
import { renderLayouts } from './layoutSource.js';

const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const OBJECT_DIR = join(ROOT, 'build/bpf');
const GENERATED = join(ROOT, 'src/datapath/bpf/generated/layouts.ts');

describe('layouts generated from the objects\' BTF', () => {
  it('src/datapath/bpf/generated/layouts.ts is what the built objects\' BTF renders (make build writes it)', () => {
    // The objects the Makefile builds from bpf/*.c (BPF_OBJ), and only those.
    const objects = readdirSync(join(ROOT, 'bpf'))
      .filter((f) => f.endsWith('.c'))
      .map((f) => f.replace(/\.c$/, '.o'))
      .sort();
    assert.ok(objects.length >= 5, `objects from bpf/*.c: ${objects.join(', ')}`);
    const text = renderLayouts(objects.map((object) => ({ object, btf: Btf.ofFile(join(OBJECT_DIR, object)) })));
    assert.equal(readFileSync(GENERATED, 'utf8'), text);
  });

  it('a member read as something else must keep its size, and name a member the struct has', () => {
    const s = defineStruct('example', 8, 4, { addr: { offset: 0, codec: codec.u32be }, port: { offset: 4, codec: codec.u16be }, pad: { offset: 6, codec: codec.pad(2) } });
    const c = structCodec(s, { addr: codec.ipAddress(4) });
    const b = Buffer.alloc(8, 0xff);
    c.write({ addr: parseIp('10.0.0.1'), port: 80 }, b, 0);
    assert.deepEqual(c.read(b, 0), { addr: parseIp('10.0.0.1'), port: 80 });
    assert.deepEqual([...b], [10, 0, 0, 1, 0, 80, 0, 0]);
    assert.throws(() => structCodec(s, { addr: codec.u16 }), /struct example\.addr is 4 bytes, its codec 2/);
    assert.throws(() => structCodec(s, { nope: codec.u16 } as never), /struct example has no member nope/);
    assert.throws(() => defineStruct('short', 4, 4, { x: { offset: 2, codec: codec.u32 } }), /struct short\.x: bytes 2\.\.5 are outside its 4 bytes/);
  });
});
