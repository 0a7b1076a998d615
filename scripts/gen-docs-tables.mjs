// Writes the tables the code defines (eBPF maps, drop reasons, agent flags)
// into the docs, between their marker comments (test/docs/docTables.ts).
// Run after `make build` with `make docs`; test/docs/docTables.test.ts fails
// while a committed page differs.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const { renderPages } = await import('../dist/test/docs/docTables.js');
for (const [page, text] of renderPages(root)) {
  const path = join(root, page);
  if ((await readFile(path, 'utf8')) !== text) {
    await writeFile(path, text);
    console.log(`${page}: tables written`);
  }
}
