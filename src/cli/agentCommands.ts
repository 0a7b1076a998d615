import type { Command } from 'commander';
import type { K8sStatus } from '../api/types.js';
import { type AgentOpts, call, client, output, table, withAgentOpts } from './agentCli.js';
import { CliError } from './cliError.js';
import { count } from './words.js';
import { endpointView } from './detailViews.js';
import { registerEndpointPolicyCommand } from './policyCommands.js';

/** Commands that talk to the local agent: status, endpoints, IPAM. */

export function registerAgentCommands(program: Command): void {
  withAgentOpts(program.command('status').description('agent health, kvstore, Kubernetes, IPAM usage and endpoint count')).action(async (opts: AgentOpts) => {
    const h = await call(() => client(opts).status());
    output(opts, h, () =>
      table([
        ['Agent', `${h.status} (node ${h.nodeName}, up ${h.uptimeSeconds}s)`],
        ['KVStore', `${h.kvstore.backend} ${h.kvstore.connected ? 'connected' : 'DISCONNECTED'} at revision ${h.kvstore.revision}${h.kvstore.detail ? ` (${h.kvstore.detail})` : ''}`],
        ['IPAM', `${h.ipam.mode}, ${count(h.ipam.allocated, 'address', 'addresses')} allocated`],
        ['Endpoints', String(h.endpoints) + (h.quarantinedEndpoints ? ` (${count(h.quarantinedEndpoints, 'unreadable or untrusted record')} quarantined: see the agent's log)` : '')],
        ...(h.lostPolicies ? [['Policy', `the kvstore lost ${count(h.lostPolicies, 'policy', 'policies')} still enforced from the state dir: import ${h.lostPolicies === 1 ? 'it' : 'them'} again or run \`tendril policy confirm-loss\``]] : []),
        ...(h.routingMode !== undefined || h.nodes !== undefined ? [['Nodes', `${h.nodes ?? '-'} in the cluster, routing mode ${h.routingMode ?? '-'}`]] : []),
        ...(h.kubernetes ? [['Kubernetes', kubernetesLine(h.kubernetes)]] : []),
      ]),
    );
    if (h.status !== 'ok') process.exitCode = 1;
  });

  const endpoint = program.command('endpoint').description('local endpoints');
  registerEndpointLabelCommand(endpoint);
  registerEndpointPolicyCommand(endpoint);
  withAgentOpts(endpoint.command('list').description('list endpoints')).action(async (opts: AgentOpts) => {
    const eps = await call(() => client(opts).listEndpoints());
    output(opts, eps, () =>
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
  withAgentOpts(endpoint.command('get <id>').description('one endpoint: <number>, container-id:<id>, pod-name:<ns>:<name>, ipv4:<ip>')).action(
    async (id: string, opts: AgentOpts) => {
      const ep = await call(() => client(opts).getEndpoint(id));
      output(opts, ep, () => endpointView(ep));
    },
  );

  const ipam = program.command('ipam').description('IP address management');
  withAgentOpts(ipam.command('list').description('addresses allocated on this node')).action(async (opts: AgentOpts) => {
    const l = await call(() => client(opts).listIpam());
    output(opts, l, () =>
      `IPAM mode: ${l.mode}\n` +
      table([
        ['IP', 'OWNER', 'POOL', 'CIDR', 'STATE'],
        ...l.allocations.map((a) => [a.ip, a.owner, a.pool, a.cidr, a.expiresAt ? `provisional until ${new Date(a.expiresAt).toISOString()}` : 'allocated']),
      ]),
    );
  });
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
    output(opts, ids, () => table([['ID', 'SCOPE', 'REFS', 'LABELS'], ...ids.map((i) => [String(i.id), i.scope, String(i.references ?? ''), i.labels.join(' ')])]));
  });
  withAgentOpts(identity.command('get <id>').description('one identity')).action(async (id: string, opts: AgentOpts) => {
    const i = await call(() => client(opts).getIdentity(id));
    output(opts, i, () => table([['ID', 'SCOPE', 'REFS', 'LABELS'], [String(i.id), i.scope, String(i.references ?? ''), i.labels.join(' ')]]));
  });

  const ip = program.command('ip').description('the ipcache: IP/CIDR → identity');
  withAgentOpts(ip.command('list').description('every ipcache entry, local and from other nodes')).action(async (opts: AgentOpts) => {
    const entries = await call(() => client(opts).listIpcache());
    output(opts, entries, () => table([['PREFIX', 'IDENTITY', 'HOST', 'SOURCE', 'OWNER'], ...entries.map((e) => [e.prefix, String(e.identity), e.hostIP ?? '-', e.source, e.owner])]));
  });
}

export function registerEndpointLabelCommand(endpoint: Command): void {
  withAgentOpts(endpoint.command('labels <id>').description('add or delete endpoint labels (a new identity follows)'))
    .option('--add <label>', 'label to add, k=v or source:k=v (repeatable)', repeatable)
    .option('--delete <key>', 'label key to delete, k or source:k (repeatable)', repeatable)
    .action(async (id: string, opts: AgentOpts & { add?: string[]; delete?: string[] }) => {
      if (!opts.add?.length && !opts.delete?.length) throw new CliError('give --add and/or --delete');
      const body = { ...(opts.add ? { add: opts.add } : {}), ...(opts.delete ? { delete: opts.delete } : {}) };
      const ep = await call(() => client(opts).patchEndpointLabels(id, body));
      output(opts, ep, () => `endpoint ${ep.id}: identity ${ep.identity ?? '-'}, labels ${ep.labels.join(' ') || '-'}\n`);
    });
}
