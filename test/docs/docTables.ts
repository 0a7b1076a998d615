/**
 * The tables in the docs that the code defines: the pinned eBPF maps (from
 * the layouts generated from the objects' BTF), the drop reasons
 * (DropReason) and tendril-agent's flags (its command definition). Each
 * sits between marker comments in its page; scripts/gen-docs-tables.mjs
 * writes them (`make docs`), and docTables.test.ts fails while a committed
 * page differs from what the code renders.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command, Option } from 'commander';
import { agentCommand } from '../../src/agent/agentCli.js';
import { DROP_OWN_RANGE, DropReason, MapName, type MapNameValue } from '../../src/datapath/bpf/constants.js';
import { mapLayouts, structLayouts } from '../../src/datapath/bpf/generated/layouts.js';
import { snakeCase } from '../../src/datapath/bpf/layoutSource.js';

/** What each pinned map holds, in words; its type, key and value come from the objects. */
const MAP_PURPOSE = {
  [MapName.ENDPOINTS]: 'local endpoints by address: their device, identity, endpoint ID, flags and MACs',
  [MapName.IPCACHE]: 'prefix → identity (and the node to tunnel to, for the overlay)',
  [MapName.POLICY]: 'every endpoint\'s policy: (endpoint ID, peer identity with 0 = any, direction, protocol, port prefix) → allow/deny, rule cookie, matched L4 bits; a staged view\'s entries with the staged bit in the direction',
  [MapName.CT_TCP]: 'TCP conntrack: the flow\'s original tuple → deadline, counters, identities, endpoints, TCP flags seen, the service\'s backend and frontend',
  [MapName.CT_ANY]: 'conntrack of every other protocol, as `tendril_ct4_tcp`',
  [MapName.FRAG]: 'a first fragment\'s ports for the later fragments',
  [MapName.CT6_TCP]: 'IPv6 TCP conntrack, as `tendril_ct4_tcp` with 16-byte addresses in the key',
  [MapName.CT6_ANY]: 'IPv6 conntrack of every other protocol, as `tendril_ct4_any`',
  [MapName.FRAG6]: 'an IPv6 first fragment\'s ports for the later fragments (keyed by the fragment header\'s identification)',
  [MapName.METRICS]: 'packets and bytes by reason (0 = forwarded, else the drop code) and direction',
  [MapName.EVENTS]: 'drop, policy-verdict and trace records for `tendril monitor`',
  [MapName.CONFIG]: 'the datapath configuration, one entry',
  [MapName.LB_SERVICES]: 'service frontends: slot 0 holds the backend count, service ID, flags and affinity timeout; slot n the n-th backend',
  [MapName.LB_BACKENDS]: 'backend ID → address, port, protocol, state',
  [MapName.LB_REVNAT]: 'service ID (reverse NAT index) → frontend',
  [MapName.LB_AFFINITY]: 'ClientIP session affinity: (client, service ID) → backend, last used',
  [MapName.LB_MAGLEV]: 'service ID → its Maglev table (an inner array of backend IDs)',
  [MapName.LB_MEMBERS]: '(service ID, backend ID) → 1: every backend a service has, in any state',
  [MapName.LB_SOURCE_RANGES]: '(service ID, client prefix) → 1: a LoadBalancer\'s `loadBalancerSourceRanges`, both families (LPM trie)',
  [MapName.LB6_SERVICES]: 'IPv6 service frontends, as `tendril_lb4_svc` with 16-byte addresses',
  [MapName.LB6_BACKENDS]: 'IPv6 backends: backend ID → address, port, protocol, state',
  [MapName.LB6_REVNAT]: 'IPv6 service ID (reverse NAT index) → frontend',
  [MapName.LB6_AFFINITY]: 'IPv6 ClientIP session affinity: (client, service ID) → backend, last used',
  [MapName.SNAT]: 'SNAT mappings, each direction: a flow\'s tuple → the translated address and port',
  [MapName.SNAT6]: 'IPv6 SNAT mappings (`--ipv6-masquerade`), as `tendril_snat4` with 16-byte addresses',
  [MapName.DEVICES]: 'the node\'s devices with programs: ifindex → IPv4 and IPv6 address, masquerade flag, MAC',
  [MapName.NO_MASQUERADE]: 'the masquerade CIDRs of both families (IPv6 with `--ipv6-masquerade`): pod traffic to them is not masqueraded',
  [MapName.CT_BUDGET]: 'endpoint ID → conntrack entries charged to it (`--bpf-ct-endpoint-max`)',
} as const satisfies Record<MapNameValue, string>;

/** Text for a table cell: pipes escaped, and `<`/`>` outside code spans so `<state-dir>` is not read as HTML. */
function cell(text: string): string {
  return text
    .replace(/\n/g, ' ')
    .split('`')
    .map((part, i) => (i % 2 === 1 ? part : part.replace(/</g, '&lt;').replace(/>/g, '&gt;')))
    .join('`')
    .replace(/\|/g, '\\|');
}

/** `struct ct4_key` with its members (not padding), or a scalar type as it is. */
function slotText(slot: { cType: string; size: number } | undefined): string {
  if (!slot) return '—';
  const name = slot.cType.replace(/^struct /, '');
  const layout = (structLayouts as Record<string, { fields: Record<string, { codec: { size: number } }> } | undefined>)[name];
  if (!layout || !slot.cType.startsWith('struct ')) return `\`${slot.cType}\``;
  const members = Object.keys(layout.fields)
    .filter((m) => !m.startsWith('pad'))
    .map(snakeCase);
  return `\`${name}\`: ${members.join(', ')}`;
}

export function renderMapTable(): string {
  const rows = Object.values(MapName).map((name) => {
    const m = mapLayouts[name];
    return `| \`${name}\` | ${m.type} | ${cell(slotText(m.key))} | ${cell(slotText(m.value))} | ${cell(MAP_PURPOSE[name])} |`;
  });
  return ['| map | type | key | value | holds |', '| --- | --- | --- | --- | --- |', ...rows].join('\n');
}

export function renderDropTable(): string {
  const rows = Object.entries(DropReason)
    .map(([name, r]) => ({ name, code: -r.code, text: r.text, cilium: 'cilium' in r ? r.cilium : undefined }))
    .sort((a, b) => a.code - b.code)
    .map((r) => `| ${r.code} | \`${r.name}\` | ${cell(r.text)} | ${r.cilium ? `\`${r.cilium}\`` : `tendril's own (${DROP_OWN_RANGE.first}–${DROP_OWN_RANGE.last})`} |`);
  return ['| code | reason | meaning | Cilium |', '| --- | --- | --- | --- |', ...rows].join('\n');
}

function optionText(o: Option): string {
  const parts = [o.description];
  if (o.argChoices) parts.push(`one of ${o.argChoices.map((c) => `\`${c}\``).join(', ')}`);
  return parts.filter((p) => p !== '').join('; ');
}

function flagRows(cmd: Command, path: string): string[] {
  const own = cmd.options.filter((o) => !o.hidden && o.long !== '--help').map((o) => `| \`${path}\` | \`${o.flags}\` | ${cell(optionText(o))} |`);
  return [...own, ...cmd.commands.flatMap((c) => flagRows(c, `${path} ${c.name()}`))];
}

export function renderAgentFlagTable(): string {
  return ['| command | flag | what it sets |', '| --- | --- | --- |', ...flagRows(agentCommand(), 'tendril-agent')].join('\n');
}

export interface DocTable {
  /** The page, from the repository root. */
  page: string;
  name: string;
  /** Where the table comes from, said in the start marker. */
  source: string;
  render: () => string;
}

export const DOC_TABLES: readonly DocTable[] = [
  { page: 'docs/architecture.md', name: 'maps', source: 'MapName and the objects\' BTF', render: renderMapTable },
  { page: 'docs/reference.md', name: 'drop-reasons', source: 'DropReason in src/datapath/bpf/constants.ts', render: renderDropTable },
  { page: 'docs/reference.md', name: 'agent-flags', source: 'tendril-agent\'s command definition', render: renderAgentFlagTable },
];

/** The markers a table sits between. */
export function markers(t: Pick<DocTable, 'name' | 'source'>): { start: string; end: string } {
  return {
    start: `<!-- generated table ${t.name}: from ${t.source} by scripts/gen-docs-tables.mjs (make docs); do not edit -->`,
    end: `<!-- end of generated table ${t.name} -->`,
  };
}

/** The page's text with the table's body between its markers replaced; a page without both markers throws. */
export function withTable(text: string, t: DocTable): string {
  const { start, end } = markers(t);
  const from = text.indexOf(start);
  const to = text.indexOf(end);
  if (from < 0 || to < from) throw new Error(`${t.page} has no markers for the generated table ${t.name}: put\n${start}\n${end}\nwhere it belongs`);
  return `${text.slice(0, from + start.length)}\n${t.render()}\n${text.slice(to)}`;
}

/** Every page with a generated table, as the code renders it now. */
export function renderPages(root: string): Map<string, string> {
  const pages = new Map<string, string>();
  for (const t of DOC_TABLES) {
    const text = pages.get(t.page) ?? readFileSync(join(root, t.page), 'utf8');
    pages.set(t.page, withTable(text, t));
  }
  return pages;
}
