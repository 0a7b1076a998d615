// Writes the C headers generated from TypeScript constants (the one
// definition) into the directory given: identity numbers and the datapath's
// shared constants. Run by `make build` after tsc; a file is rewritten only
// when its text changes, so BPF objects rebuild only when they must.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

const out = process.argv[2];
if (!out) {
  console.error('usage: gen-bpf-headers.mjs <output dir>');
  process.exit(2);
}
const { renderIdentityHeader } = await import('../dist/src/identity/constants.js');
const { renderDatapathHeader } = await import('../dist/src/datapath/bpf/constants.js');
await mkdir(out, { recursive: true });
for (const [name, text] of [
  ['identity.h', renderIdentityHeader()],
  ['tendril_constants.h', renderDatapathHeader()],
]) {
  const path = join(out, name);
  const old = await readFile(path, 'utf8').catch(() => undefined);
  if (old !== text) await writeFile(path, text);
}
