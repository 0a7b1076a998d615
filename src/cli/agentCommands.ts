import type { Command } from 'commander';
import type { DatapathStatus, Health, K8sStatus } from '../api/types.js';
import { type AgentOpts, call, client, output, table, withAgentOpts } from './agentCli.js';
import { formatLabel, LabelSource, parsePodLabel, podLabelDefaultSource } from '../labels/index.js';
import { CliError } from './cliError.js';
import { count } from './words.js';
import { endpointView } from './detailViews.js';
import { registerEndpointPolicyCommand } from './policyCommands.js';

/** Commands that talk to the local agent: status, endpoints, IPAM. */

export function registerAgentCommands(program: Command): void {
  withAgentOpts(program.command('status').description('agent health, kvstore, Kubernetes, IPAM, endpoints, the datapath (bpffs, programs, map pressure, recent drops), services, policies and masquerade')).action(async (opts: AgentOpts) => {
    const h = await call(() => client(opts).status());
    await output(opts, h, () =>
      table([
        ['Agent', `${h.status} (node ${h.nodeName}, up ${h.uptimeSeconds}s)`],
        ['KVStore', `${h.kvstore.backend} ${h.kvstore.connected ? 'connected' : 'DISCONNECTED'} at revision ${h.kvstore.revision}${h.kvstore.detail ? ` (${h.kvstore.detail})` : ''}`],
        ['IPAM', `${h.ipam.mode}, ${count(h.ipam.allocated, 'address', 'addresses')} allocated`],
        ['Endpoints', String(h.endpoints) + (h.quarantinedEndpoints ? ` (${count(h.quarantinedEndpoints, 'unreadable or untrusted record')} quarantined: see the agent's log)` : '')],
        ...(h.lostPolicies ? [['Policy', `the kvstore lost ${count(h.lostPolicies, 'policy', 'policies')} still enforced from the state dir: import ${h.lostPolicies === 1 ? 'it' : 'them'} again or run \`tendril policy confirm-loss\``]] : []),
        ...(h.routingMode !== undefined || h.nodes !== undefined ? [['Nodes', `${h.nodes ?? '-'} in the cluster, routing mode ${h.routingMode ?? '-'}`]] : []),
        ...(h.kubernetes ? [['Kubernetes', kubernetesLine(h.kubernetes)]] : []),
        ...(h.datapath ? datapathRows(h.datapath) : []),
        ...(h.services ? [['Services', `${h.services.count} (${count(h.services.backends, 'backend')})`]] : []),
        ...(h.policies
          ? [['Policies', `${h.policies.count - (h.policies.staged ?? 0)} in force${h.policies.staged ? `, ${h.policies.staged} staged (reported, not enforced)` : ''}, ${count(h.policies.endpointsEnforced, 'endpoint')} with policy enforced${h.policies.auditMode ? '; AUDIT MODE: policy refusals are reported and pass' : ''}`]]
          : []),
        ...(h.masquerade ? [['Masquerade', masqueradeLine(h.masquerade)]] : []),
      ]),
    );
    if (h.status !== 'ok') process.exitCode = 1;
  });

  const endpoint = program.command('endpoint').description('local endpoints');
  registerEndpointLabelCommand(endpoint);
  registerEndpointPolicyCommand(endpoint);
  withAgentOpts(endpoint.command('list').description('list endpoints')).action(async (opts: AgentOpts) => {
    const eps = await call(() => client(opts).listEndpoints());
    await output(opts, eps, () =>
      table([
        ['ENDPOINT', 'STATE', 'IDENTITY', 'CONTAINER', 'IFACE', 'POD', 'IPS', 'HOST IF', 'LABELS'],
        ...eps.map((e) => [
          String(e.id),
          e.state,
          e.identity === undefined ? '-' : String(e.identity),
          e.containerId.slice(0, 20),
          e.ifName,
          e.podName ? `${e.podNamespace ?? ''}/${e.podName}` : '-',
          e.addresses.map((a) => a.ip).join(','),
          e.hostIfName,
          e.labels.join(' '),
        ]),
      ]),
    );
  });
  withAgentOpts(endpoint.command('get <id>').description('one endpoint: <number>, container-id:<id>, pod-name:<ns>:<name>, ipv4:<ip> or ipv6:<ip>')).action(
    async (id: string, opts: AgentOpts) => {
      const ep = await call(() => client(opts).getEndpoint(id));
      await output(opts, ep, () => endpointView(ep));
    },
  );

  const ipam = program.command('ipam').description('IP address management');
  withAgentOpts(ipam.command('list').description('addresses allocated on this node')).action(async (opts: AgentOpts) => {
    const l = await call(() => client(opts).listIpam());
    await output(opts, l, () =>
      `IPAM mode: ${l.mode}\n` +
      table([
        ['IP', 'OWNER', 'POOL', 'CIDR', 'STATE'],
        ...l.allocations.map((a) => [a.ip, a.owner, a.pool, a.cidr, a.expiresAt ? `provisional until ${new Date(a.expiresAt).toISOString()}` : 'allocated']),
      ]),
    );
  });
}

/** One decimal: a map of 500k entries is not "0%" full with thousands in it. */
const percent = (entries: number, max: number) => `${((100 * entries) / max).toFixed(1)}%`;

/**
 * The datapath as `cilium status` shows it, one line each: the bpffs (loud
 * when private: nothing fails at start, the damage shows at the next stop),
 * programs on devices and endpoints, the fullest maps, recent drops.
 */
export function datapathRows(d: DatapathStatus): string[][] {
  if (d.kind !== 'bpf') return [['Datapath', `${d.kind} (no eBPF programs)`]];
  const rows: string[][] = [];
  if (d.bpffs) {
    const b = d.bpffs;
    const where = b.sharing === 'node' ? "the node's" : b.sharing === 'private' ? "PRIVATE to the agent's mount namespace: programs and maps are lost when the agent stops" : `not known to be the node's (${b.detail ?? 'pid 1 not readable'})`;
    rows.push(['BPF filesystem', `${b.root} (${where})${b.fix ? `. Fix: ${b.fix}` : ''}`]);
  }
  if (d.programs) {
    const { devices, endpoints } = d.programs;
    const broken = devices.filter((x) => x.missing.length > 0).map((x) => `${x.name} ${x.missing.join('+')}`);
    const names = devices.map((x) => x.name).join(', ');
    const devicePart = broken.length === 0 ? `${count(devices.length, 'device')} (${names})` : `MISSING on ${broken.join(', ')} of ${count(devices.length, 'device')} (${names})`;
    const epPart = `${endpoints.attached}/${endpoints.expected} endpoints${endpoints.missing.length > 0 ? ` (MISSING on ${endpoints.missing.join(', ')})` : ''}`;
    rows.push(['Programs', `${devicePart}; ${epPart}`]);
  }
  if (d.maps) rows.push(['Map pressure', d.maps.map((m) => `${m.map} ${percent(m.entries, m.maxEntries)} (${m.entries}/${m.maxEntries})`).join(', ') || '-']);
  if (d.drops) {
    const { total, topReasons, windowSeconds } = d.drops;
    rows.push([`Drops (last ${windowSeconds}s)`, total === 0 ? '0' : `${total} (${topReasons.map((r) => `${r.reason} ${r.packets}`).join(', ')})`]);
  }
  return rows;
}

/** Off, or who masquerades what, where, with which source ports. */
export function masqueradeLine(m: NonNullable<Health['masquerade']>): string {
  if (!m.enabled) return 'off';
  const parts = [`on (${m.by ?? 'unknown'})`, `for ${m.cidrs.join(', ') || '-'}`];
  // The eBPF masquerade runs on node devices only: with none detected nothing leaves masqueraded.
  if (m.by === 'bpf') parts.push(m.devices.length > 0 ? `on ${m.devices.join(', ')}` : 'on NO node device (none has a global IPv4 address; see --devices)');
  if (m.natPortRanges.length > 0) parts.push(`NAT ports ${m.natPortRanges.join(', ')}`);
  return parts.join(', ');
}

/** "2s ago", "3m ago", "1h ago": how long since an ISO time. */
function ago(iso: string, now: number): string {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 120) return `${s}s ago`;
  if (s < 7200) return `${Math.round(s / 60)}m ago`;
  return `${Math.round(s / 3600)}h ago`;
}

/**
 * One line on the agent's watch of the API server: connected or not, synced
 * (objects per resource) or which resources are still listing, the last
 * event, and a resource's last error (a refused policy, a missing CRD, a
 * lost connection).
 */
export function kubernetesLine(k: K8sStatus, now = Date.now()): string {
  const connection = k.connected ? `connected to ${k.apiServer}` : `DISCONNECTED from ${k.apiServer}`;
  const pending = k.resources.filter((r) => !r.synced).map((r) => r.resource);
  const sync = k.synced ? `synced (${k.resources.map((r) => `${r.resource} ${r.objects}`).join(', ')})` : `NOT SYNCED (waiting for ${pending.join(', ') || 'the first list'})`;
  const last = k.resources.map((r) => r.lastEventAt).filter((t): t is string => t !== undefined).sort().at(-1);
  const errors = k.resources.filter((r) => r.lastError !== undefined).map((r) => `${r.resource}: ${r.lastError}`);
  return [connection, sync, ...(last ? [`last event ${ago(last, now)}`] : []), ...(errors.length > 0 ? [`last error ${errors[0]}`] : [])].join(', ');
}

const repeatable = (v: string, prev: string[] = []) => [...prev, v];

/** Identity, ipcache and endpoint-label commands. */
export function registerIdentityCommands(program: Command): void {
  const identity = program.command('identity').description('security identities');
  withAgentOpts(identity.command('list').description('reserved identities and those this node holds')).action(async (opts: AgentOpts) => {
    const ids = await call(() => client(opts).listIdentities());
    await output(opts, ids, () => table([['ID', 'SCOPE', 'REFS', 'LABELS'], ...ids.map((i) => [String(i.id), i.scope, String(i.references ?? ''), i.labels.join(' ')])]));
  });
  withAgentOpts(identity.command('get <id>').description('one identity')).action(async (id: string, opts: AgentOpts) => {
    const i = await call(() => client(opts).getIdentity(id));
    await output(opts, i, () => table([['ID', 'SCOPE', 'REFS', 'LABELS'], [String(i.id), i.scope, String(i.references ?? ''), i.labels.join(' ')]]));
  });

  const ip = program.command('ip').description('the ipcache: IP/CIDR → identity');
  withAgentOpts(ip.command('list').description('every ipcache entry, local and from other nodes')).action(async (opts: AgentOpts) => {
    const entries = await call(() => client(opts).listIpcache());
    await output(opts, entries, () => table([['PREFIX', 'IDENTITY', 'HOST', 'SOURCE', 'OWNER'], ...entries.map((e) => [e.prefix, String(e.identity), e.hostIP ?? '-', e.source, e.owner])]));
  });
}

export function registerEndpointLabelCommand(endpoint: Command): void {
  withAgentOpts(
    endpoint
      .command('labels <id>')
      .description(
        'add or delete endpoint labels (a new identity follows); <id> is an endpoint ID, container-id:<id> (podman: the full ID podman inspect shows; ctr: <namespace>-<name>), pod-name:<ns>:<name>, ipv4:<ip> or ipv6:<ip>',
      ),
  )
    .option('--add <label>', `label to add, [source:]k=v (repeatable); without a source it gets ${LabelSource.K8s}: on a pod of a Kubernetes namespace and ${LabelSource.Container}: on any other container (write k8s:app=web or container:app=web to choose)`, repeatable)
    .option('--delete <key>', 'label key to delete, k (every source) or source:k (repeatable)', repeatable)
    .action(async (id: string, opts: AgentOpts & { add?: string[]; delete?: string[] }) => {
      if (!opts.add?.length && !opts.delete?.length) throw new CliError('give --add and/or --delete');
      const body = { ...(opts.add ? { add: opts.add } : {}), ...(opts.delete ? { delete: opts.delete } : {}) };
      const ep = await call(() => client(opts).patchEndpointLabels(id, body));
      await output(opts, ep, () => `endpoint ${ep.id}: identity ${ep.identity ?? '-'}, labels ${ep.labels.join(' ') || '-'}\n${addedLabelLines(opts.add ?? [], ep.podNamespace)}`);
    });
}

/**
 * Which label each --add became, resolved by the agent's own function: a
 * label without a source is `container:` outside Kubernetes, which no
 * NetworkPolicy selects, so the source is said, with how to choose another.
 */
export function addedLabelLines(added: readonly string[], podNamespace: string | undefined): string {
  let out = '';
  for (const text of added) {
    const label = formatLabel(parsePodLabel(text, podNamespace));
    if (label === text) {
      out += `added ${label}\n`;
      continue;
    }
    const source = podLabelDefaultSource(podNamespace);
    const why = podNamespace ? `the endpoint is a pod of namespace ${podNamespace}` : 'the endpoint has no pod namespace';
    const other = source === LabelSource.K8s ? LabelSource.Container : LabelSource.K8s;
    out += `added ${label} (no source given: ${source}:, as ${why}; write ${other}:${text} for a ${other}: label)\n`;
  }
  if (out.includes('(no source given') && !podNamespace) {
    out += 'a selector without a source (tendril policy) matches any source; a NetworkPolicy matches only k8s: labels of its own namespace, so it selects none of this endpoint\'s labels\n';
  }
  return out;
}
