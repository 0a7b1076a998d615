import type { Command } from 'commander';
import type { ResponseBody } from '../api/types.js';
import { protocolName } from '../monitor/index.js';
import { type AgentOpts, call, client, output, table, withAgentOpts } from './agentCli.js';
import { CliError } from './cliError.js';
import { addressPort, count, portRangeText } from './words.js';

type PolicyEntries = ResponseBody<'getBpfPolicy', 200>['entries'];
type CtEntries = ResponseBody<'listBpfConntrack', 200>;

export function policyTable(entries: PolicyEntries): string {
  return table([
    ['DIRECTION', 'IDENTITY', 'LABELS', 'PORT/PROTO', 'ACTION', 'RULE'],
    ...entries.map((e) => [e.staged === true ? `${e.direction} (staged)` : e.direction, e.identity === 0 ? 'ANY' : String(e.identity), e.identity === 0 ? '(any peer)' : e.identityLabels.join(' ') || '-', portRangeText(e.proto, e.portFirst, e.portLast), e.action.toUpperCase(), e.rule.text]),
  ]);
}

const TCP_FLAG_LETTERS: Array<[number, string]> = [
  [0x02, 'S'],
  [0x10, 'A'],
  [0x01, 'F'],
  [0x04, 'R'],
];

export function ctTable(rows: CtEntries): string {
  return table([
    ['PROTO', 'SOURCE', 'DESTINATION', 'EXPIRES', 'PACKETS', 'BYTES', 'STATE', 'ENDPOINTS', 'IDENTITIES'],
    ...rows.map((r) => {
      const flags = r.proto === 6 ? TCP_FLAG_LETTERS.filter(([b]) => (r.tcpFlags & b) !== 0).map(([, l]) => l).join('') : '';
      const state = [r.replySeen ? 'replied' : 'new', ...(r.closed ? ['closed'] : r.closing ? ['closing'] : []), ...(r.charged ? ['charged'] : []), ...(flags ? [flags] : [])].join(',');
      return [
        protocolName(r.proto),
        `${r.saddr}:${r.sport}`,
        `${r.daddr}:${r.dport}`,
        r.expiresInSeconds < 0 ? 'expired' : `${Math.round(r.expiresInSeconds)}s`,
        String(r.packets),
        String(r.bytes),
        state,
        `${r.srcEndpoint || '-'} -> ${r.dstEndpoint || '-'}`,
        `${r.srcIdentity} -> ${r.dstIdentity}`,
      ];
    }),
  ]);
}

type LbServices = ResponseBody<'listBpfLoadBalancer', 200>['services'];

/** As `cilium bpf lb list`: a frontend per block, slot 0 first (the service ID and count), then a line per slot. */
export function lbServiceTable(services: LbServices): string {
  const rows = [['SERVICE ADDRESS', 'SCOPE', 'BACKEND ADDRESS (SERVICE ID) (SLOT)', 'FLAGS']];
  for (const s of services) {
    const flags = [...s.flags, ...(s.affinityTimeoutSec > 0 && s.flags.includes('affinity') ? [`timeout ${s.affinityTimeoutSec}s`] : []), ...(s.maglevTable ? ['maglev-table'] : [])];
    rows.push([s.frontend, s.scope, `0.0.0.0:0 (${s.id}) (0) [${count(s.count, 'backend')}]`, flags.join(', ') || '-']);
    for (const slot of s.slots) rows.push(['', '', `${slot.backend ?? `backend ${slot.backendId} (missing)`} (${s.id}) (${slot.slot})${slot.state && slot.state !== 'active' ? ` [${slot.state}]` : ''}`, '']);
  }
  return table(rows);
}

export function natTable(r: ResponseBody<'listBpfNat', 200>): string {
  const mappings = table([
    ['PROTO', 'DIR', 'TUPLE', 'TRANSLATION', 'FLAGS', 'AGE'],
    ...r.mappings.map((m) => [
      m.protocol,
      m.direction === 'egress' ? 'OUT' : 'IN',
      `${addressPort(m.saddr, m.sport)} -> ${addressPort(m.daddr, m.dport)}`,
      `${m.direction === 'egress' ? 'source' : 'destination'} ${addressPort(m.toAddr, m.toPort)}`,
      m.flags.join(',') || '-',
      `${Math.round(m.ageSeconds)}s`,
    ]),
  ]);
  const devices = table([
    ['DEVICE', 'IPV4', 'IPV6', 'MAC', 'MASQUERADE'],
    ...r.devices.map((d) => [`${d.ifName ?? '?'} (${d.ifindex})`, d.ipv4, d.ipv6 ?? '-', d.mac, d.masquerade ? 'yes' : 'no']),
  ]);
  return `${mappings}\n${devices}`;
}

export function endpointId(text: string, what = 'endpoint'): number {
  if (!/^\d{1,5}$/.test(text) || Number(text) > 0xffff) throw new CliError(`${what} must be an endpoint number (0-65535), got "${text}"`);
  return Number(text);
}

/** `tendril bpf …`: the eBPF datapath's maps as the programs see them, decoded. */
export function registerBpfCommands(program: Command): void {
  const bpf = program.command('bpf').description('the eBPF datapath\'s maps: endpoints, ipcache, policy, conntrack, load balancer, SNAT, metrics');

  const endpoint = bpf.command('endpoint').description('the local endpoint map');
  withAgentOpts(endpoint.command('list').description('local endpoint map entries')).action(async (opts: AgentOpts) => {
    const rows = await call(() => client(opts).listBpfEndpoints());
    await output(opts, rows, () =>
      table([
        ['IP', 'ENDPOINT', 'IDENTITY', 'IFACE', 'LXC MAC', 'POD MAC', 'FLAGS', 'LABELS'],
        ...rows.map((r) => [r.ip, r.host ? 'host' : String(r.endpointId), String(r.identity), `${r.ifName ?? '?'} (${r.ifindex})`, r.lxcMac, r.podMac, String(r.flags), (r.identityLabels ?? []).join(' ')]),
      ]),
    );
  });

  const ipcache = bpf.command('ipcache').description('the ipcache map');
  withAgentOpts(ipcache.command('list').description('ipcache map entries: prefix → identity')).action(async (opts: AgentOpts) => {
    const rows = await call(() => client(opts).listBpfIpcache());
    await output(opts, rows, () =>
      table([['PREFIX', 'IDENTITY', 'TUNNEL', 'LABELS'], ...rows.map((r) => [r.prefix, String(r.identity), r.tunnelEndpoint ?? '-', (r.identityLabels ?? []).join(' ')])]),
    );
  });

  const policy = bpf.command('policy').description('the policy map');
  withAgentOpts(policy.command('get <endpoint>').description('an endpoint\'s policy map entries, each with the rule that put it there')).action(
    async (id: string, opts: AgentOpts) => {
      const ep = endpointId(id);
      const r = await call(() => client(opts).getBpfPolicy(ep));
      await output(opts, r, () => (r.entries.length === 0 ? `endpoint ${ep}: no policy map entries\n` : policyTable(r.entries)));
    },
  );

  const ct = bpf.command('ct').description('the conntrack tables');
  withAgentOpts(ct.command('list').description('conntrack entries'))
    .option('--endpoint <id>', 'only flows this endpoint opened or that were opened to it')
    .action(async (opts: AgentOpts & { endpoint?: string }) => {
      const query = opts.endpoint !== undefined ? { endpoint: endpointId(opts.endpoint, '--endpoint') } : {};
      const rows = await call(() => client(opts).listBpfConntrack(query));
      await output(opts, rows, () => ctTable(rows));
    });
  withAgentOpts(ct.command('flush').description('delete every conntrack entry (flows go through policy again)')).action(async (opts: AgentOpts) => {
    const r = await call(() => client(opts).flushBpfConntrack());
    await output(opts, r, () => `Deleted ${r.removed.tcp} TCP and ${r.removed.any} other conntrack entries\n`);
  });
  withAgentOpts(ct.command('gc').description('remove expired conntrack entries now')).action(async (opts: AgentOpts) => {
    const r = await call(() => client(opts).gcBpfConntrack());
    const nat = r.nat ? `; ${r.nat.removed} SNAT mappings of ended flows (${r.nat.orphans} orphaned reply sides)` : '';
    await output(opts, r, () => `Removed ${r.tcp.removed} of ${r.tcp.scanned} TCP and ${r.any.removed} of ${r.any.scanned} other entries${nat} in ${r.durationMs} ms\n${r.sample.length > 0 ? ctTable(r.sample) : ''}`);
  });

  const lb = bpf.command('lb').description('the load-balancer maps');
  withAgentOpts(lb.command('list').description('service entries with each slot\'s backend; --backends, --revnat, --affinity for those maps'))
    .option('--backends', 'the backend map')
    .option('--revnat', 'the reverse NAT map')
    .option('--affinity', 'the session affinity map')
    .action(async (opts: AgentOpts & { backends?: boolean; revnat?: boolean; affinity?: boolean }) => {
      const r = await call(() => client(opts).listBpfLoadBalancer());
      await output(opts, r, () => {
        if (opts.backends) return table([['ID', 'ADDRESS', 'PROTO', 'STATE'], ...r.backends.map((b) => [String(b.id), addressPort(b.address, b.port), b.protocol, b.state])]);
        if (opts.revnat) return table([['ID', 'FRONTEND'], ...r.reverseNat.map((n) => [String(n.id), addressPort(n.address, n.port)])]);
        if (opts.affinity) return table([['SERVICE', 'CLIENT', 'BACKEND', 'IDLE'], ...r.affinity.map((a) => [String(a.serviceId), a.client, String(a.backendId), `${Math.round(a.idleSeconds)}s`])]);
        return lbServiceTable(r.services);
      });
    });

  const nat = bpf.command('nat').description('the SNAT map');
  withAgentOpts(nat.command('list').description('SNAT mappings (masquerade and NodePort) and the devices SNAT uses')).action(async (opts: AgentOpts) => {
    const r = await call(() => client(opts).listBpfNat());
    await output(opts, r, () => natTable(r));
  });

  withAgentOpts(bpf.command('metrics').description('packets and bytes by reason (forwarded or drop reason) and direction')).action(async (opts: AgentOpts) => {
    const rows = await call(() => client(opts).listBpfMetrics());
    await output(opts, rows, () => table([['REASON', 'DIRECTION', 'PACKETS', 'BYTES'], ...rows.map((r) => [r.reasonName, r.direction, String(r.packets), String(r.bytes)])]));
  });
}
