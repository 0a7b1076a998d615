// Writes src/datapath/bpf/generated/layouts.ts from the BTF of the BPF
// objects given (the structs in bpf/lib/*.h are the one definition of every
// map key, value and record). Run by `make build` after the objects are
// compiled; the file is rewritten only when its text changes, and then the
// exit code is 3 so that make compiles the TypeScript again.
import { readFile, writeFile } from 'node:fs/promises';
import { basename } from 'node:path';

const [out, ...objects] = process.argv.slice(2);
if (!out || objects.length === 0) {
  console.error('usage: gen-layouts.mjs <output .ts> <object.o>...');
  process.exit(2);
}
const { Btf } = await import('../dist/src/datapath/bpf/btf.js');
const { renderLayouts } = await import('../dist/src/datapath/bpf/layoutSource.js');
const text = renderLayouts(objects.map((path) => ({ object: basename(path), btf: Btf.ofFile(path) })));
const old = await readFile(out, 'utf8').catch(() => undefined);
if (old !== text) {
  await writeFile(out, text);
  console.log(`${out}: the objects' structs changed; written again`);
  process.exit(3);
}
