// Bundles the compiled CLI, agent and operator (dist/src) into dist/bundle, the
// code bin/ runs. One module per file cost every process its start-up: the CLI
// loaded about 200 files (0.44 s of CPU for `tendril --version`), the agent
// about 700. Bundled, with the code the three share split into chunks each
// loads on demand, they load a few. `make build` runs it after tsc.
//
// Left out of the bundle, loaded from node_modules as before: better-sqlite3
// (a native addon), etcd3 (reads its .proto files from beside its own code at
// run time) and @kubernetes/client-node (large, loaded only when Kubernetes is
// on, and only by its own chunk's import).
import { build } from 'esbuild';
import { rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist/bundle');

await rm(out, { recursive: true, force: true });
const result = await build({
  entryPoints: {
    tendril: join(root, 'dist/src/cli/main.js'),
    'tendril-agent': join(root, 'dist/src/agent/main.js'),
    'tendril-operator': join(root, 'dist/src/operator/main.js'),
  },
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  outdir: out,
  external: ['better-sqlite3', 'etcd3', '@kubernetes/client-node'],
  // CommonJS packages inside an ES module bundle still call require() for node's own modules.
  banner: { js: "import { createRequire as __tendrilCreateRequire } from 'node:module'; const require = __tendrilCreateRequire(import.meta.url);" },
  // Not minified: a stack trace names readable code, and each chunk marks the source file of every part (// src/...).
  logLevel: 'warning',
  metafile: true,
});
// Which files went into the bundles, and what each output file imports at run time (other chunks, and the
// packages left out): the deployment test checks both against the production dependencies, the only
// packages the image keeps.
const outputs = Object.fromEntries(
  Object.entries(result.metafile.outputs).map(([file, o]) => [file, o.imports.map((i) => ({ path: i.path, external: i.external === true }))]),
);
await writeFile(join(out, 'meta.json'), JSON.stringify({ inputs: Object.keys(result.metafile.inputs).sort(), outputs }, null, 1));
