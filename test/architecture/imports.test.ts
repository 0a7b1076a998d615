// Which way imports flow, read from the source tree: src/agent only wires the
// subsystems together (nothing imports it), production code never reaches
// into test/, and the domain subsystems do not depend on the eBPF
// implementation's constants (what they share with it is in
// src/datapath/limits.ts).
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

/** The repository, from dist/test/architecture/ (tests run compiled). */
const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** Subsystems with no business with the eBPF datapath's implementation. */
const DOMAIN = ['src/service', 'src/node', 'src/k8s', 'src/ipam', 'src/endpoint', 'src/policy', 'src/identity', 'src/ipcache', 'src/labels', 'src/kvstore', 'src/netip', 'src/cni', 'src/libcni'];

interface Import {
  /** The importing file, repository-relative. */
  from: string;
  /** The imported module, repository-relative (relative specifiers only). */
  to: string;
}

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(join(repoRoot, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory()) {
      if (path !== 'src/api/generated') out.push(...sourceFiles(path));
    } else if (entry.name.endsWith('.ts')) out.push(path);
  }
  return out;
}

/** Static, side-effect and dynamic imports and re-exports with a relative specifier. */
function importsOf(file: string): Import[] {
  const text = readFileSync(join(repoRoot, file), 'utf8');
  const out: Import[] = [];
  for (const m of text.matchAll(/(?:\bfrom\s+|\bimport\s*\(\s*|^\s*import\s+)'(\.{1,2}\/[^']+)'/gm)) {
    const to = relative(repoRoot, resolve(join(repoRoot, dirname(file)), m[1]!)).replace(/\.js$/, '.ts');
    out.push({ from: file, to });
  }
  return out;
}

/** Tests and their support: *.test.ts, and anything in a testing/ folder. */
function isTestCode(file: string): boolean {
  return file.endsWith('.test.ts') || file.split('/').includes('testing');
}

const under = (path: string, dir: string) => path === dir || path.startsWith(`${dir}/`) || path === `${dir}.ts`;
const all = sourceFiles('src').flatMap(importsOf);
const production = all.filter((i) => !isTestCode(i.from));
const show = (found: Import[]) => found.map((i) => `${i.from} → ${i.to}`).join('\n');

describe('import direction', () => {
  test('the reader sees the tree: it finds imports of every kind', () => {
    assert.ok(all.length > 1000, `only ${all.length} imports found under ${repoRoot}src`);
    assert.ok(all.some((i) => i.from === 'src/agent/agent.ts' && i.to === 'src/endpoint/index.ts'));
  });

  test('nothing outside src/agent imports src/agent (the agent only wires)', () => {
    assert.equal(show(production.filter((i) => !under(i.from, 'src/agent') && under(i.to, 'src/agent'))), '');
  });

  test('no src file but a test imports from test/', () => {
    assert.equal(show(all.filter((i) => !i.from.endsWith('.test.ts') && under(i.to, 'test'))), '');
  });

  test('domain subsystems do not import the eBPF datapath (src/datapath/bpf)', () => {
    assert.equal(show(production.filter((i) => DOMAIN.some((d) => under(i.from, d)) && under(i.to, 'src/datapath/bpf'))), '');
  });

  test('the API layer (src/api) imports no subsystem wiring and no CLI', () => {
    assert.equal(show(production.filter((i) => under(i.from, 'src/api') && (under(i.to, 'src/agent') || under(i.to, 'src/cli')))), '');
  });
});
