// Bundles the flow UI (ui/) into dist/ui: index.html and assets/ named by
// content hash, everything inlined from node_modules (preact, yaml) and
// src/flow, nothing from a CDN. `make build` runs it after tsc (which
// type-checks ui/ through ui/tsconfig.json).
import { build } from 'esbuild';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist/ui');

await rm(out, { recursive: true, force: true });
await mkdir(join(out, 'assets'), { recursive: true });
const result = await build({
  entryPoints: [join(root, 'ui/main.tsx')],
  bundle: true,
  format: 'esm',
  platform: 'browser',
  target: ['chrome110', 'firefox115', 'safari16'],
  // TENDRIL_UI_DEV=1: readable output, for profiling.
  minify: process.env.TENDRIL_UI_DEV !== '1',
  sourcemap: true,
  jsx: 'automatic',
  jsxImportSource: 'preact',
  entryNames: '[name]-[hash]',
  outdir: join(out, 'assets'),
  metafile: true,
  logLevel: 'warning',
});
const outputs = Object.keys(result.metafile.outputs).map((p) => basename(p));
const js = outputs.find((p) => p.endsWith('.js'));
const css = outputs.find((p) => p.endsWith('.css'));
if (js === undefined || css === undefined) throw new Error(`the UI bundle lacks its script or stylesheet: ${outputs.join(', ')}`);
const html = (await readFile(join(root, 'ui/index.html'), 'utf8')).replace('%SCRIPT%', `assets/${js}`).replace('%STYLE%', `assets/${css}`);
await writeFile(join(out, 'index.html'), html);
console.log(`flow UI: dist/ui (${outputs.filter((p) => !p.endsWith('.map')).join(', ')})`);
