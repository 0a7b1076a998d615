// The docs' tables of eBPF maps, drop reasons and agent flags are what the
// code renders (test/docs/docTables.ts): a map, reason or flag added, changed
// or removed without `make docs` fails here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { DropReason, MapName } from '../../src/datapath/bpf/constants.js';
import { DOC_TABLES, markers, renderPages, withTable } from './docTables.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

test('the generated tables in the docs are what the code renders now (make docs writes them)', () => {
  for (const [page, text] of renderPages(ROOT)) {
    assert.equal(readFileSync(`${ROOT}${page}`, 'utf8'), text, `${page} differs from the code's tables: run make docs`);
  }
});

test('the tables name every pinned map, every drop reason with its code, and the maps\' members from BTF', () => {
  const pages = renderPages(ROOT);
  const all = [...pages.values()].join('\n');
  for (const name of Object.values(MapName)) assert.match(all, new RegExp(`^\\| \`${name}\` \\|`, 'm'));
  for (const [name, r] of Object.entries(DropReason)) assert.match(all, new RegExp(`^\\| ${-r.code} \\| \`${name}\` \\|`, 'm'));
  // tendril_config's row lists every member of struct datapath_config.
  assert.match(all, /^\| `tendril_config` \| array \| `__u32` \| `datapath_config`: trace_level, flags, host_ifindex, maglev_table_size, tunnel_ifindex, node_ipv4, nat_ports, ct_endpoint_max, migration_until_ns, node_ipv6 \|/m);
});

test('a page without a table\'s markers is refused, not appended to', () => {
  const t = DOC_TABLES[0]!;
  assert.throws(() => withTable('# no markers here\n', t), /has no markers for the generated table/);
  const { start, end } = markers(t);
  assert.equal(withTable(`a\n${start}\nold\n${end}\nb\n`, { ...t, render: () => 'new' }), `a\n${start}\nnew\n${end}\nb\n`);
});
