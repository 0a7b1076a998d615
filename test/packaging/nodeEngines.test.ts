// Every package the lock file installs must run on the Node the README names
// (package.json's engines.node, >=20.19): `npm ci` warns otherwise, and a
// dependency that needs a newer Node may use what 20.19 lacks.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const readJson = (name: string) => JSON.parse(readFileSync(`${ROOT}${name}`, 'utf8')) as Record<string, unknown>;

type Version = [number, number, number];

/** "20", "20.19", "20.x", "20.19.0" → the version and how many parts were given. */
function parseVersion(text: string): { v: Version; parts: number } {
  const parts = text.replace(/^v/, '').split('.').filter((p) => p !== 'x' && p !== '*');
  const n = parts.map((p) => {
    if (!/^\d+$/.test(p)) throw new Error(`cannot read version "${text}"`);
    return Number(p);
  });
  return { v: [n[0] ?? 0, n[1] ?? 0, n[2] ?? 0], parts: n.length };
}

const cmp = (a: Version, b: Version) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2];

/**
 * Whether a node-semver range admits a version, for the forms engines fields
 * use: `*`, `>=X`, `^X.Y.Z`, `X`, `X.x`, `X.*`, joined by `||`. Anything else
 * fails the test loudly, so a new form is looked at, not waved through.
 */
export function rangeAdmits(range: string, version: Version): boolean {
  return range.split('||').some((alt) => {
    const a = alt.trim().replace(/\s+/g, '');
    if (a === '*' || a === '') return true;
    if (a.startsWith('>=')) return cmp(version, parseVersion(a.slice(2)).v) >= 0;
    if (a.startsWith('^')) {
      const { v } = parseVersion(a.slice(1));
      return cmp(version, v) >= 0 && version[0] === v[0];
    }
    const { v, parts } = parseVersion(a);
    return version[0] === v[0] && (parts < 2 || version[1] === v[1]) && (parts < 3 || version[2] === v[2]);
  });
}

test('the range reader', () => {
  assert.equal(rangeAdmits('>=22', [20, 19, 0]), false);
  assert.equal(rangeAdmits('>= 18', [20, 19, 0]), true);
  assert.equal(rangeAdmits('^20.19.0 || ^22.13.0 || >=24', [20, 19, 0]), true);
  assert.equal(rangeAdmits('^18.18.0 || ^20.20.0', [20, 19, 0]), false);
  assert.equal(rangeAdmits('20.x || 22.x', [20, 19, 0]), true);
  assert.equal(rangeAdmits('18 || >=22', [20, 19, 0]), false);
  assert.throws(() => rangeAdmits('~20.1', [20, 19, 0]));
});

test('every installed package admits the Node version package.json asks for', () => {
  const engines = (readJson('package.json').engines as { node: string }).node;
  assert.match(engines, /^>=\d+\.\d+$/, 'package.json names a minimum Node');
  const minimum = parseVersion(engines.slice(2)).v;
  const packages = readJson('package-lock.json').packages as Record<string, { engines?: { node?: string } | string[]; version?: string }>;
  const refused = Object.entries(packages)
    .filter(([path, p]) => path !== '' && p.engines !== undefined && !Array.isArray(p.engines) && p.engines.node !== undefined)
    .filter(([, p]) => !rangeAdmits((p.engines as { node: string }).node, minimum))
    .map(([path, p]) => `${path.replace(/^.*node_modules\//, '')}@${p.version}: node ${(p.engines as { node: string }).node}`);
  assert.deepEqual(refused, [], `packages whose engines refuse Node ${minimum.join('.')}`);
});
