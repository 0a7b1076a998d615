import type { Command } from 'commander';
import type { ResponseBody } from '../api/types.js';
import { type AgentOpts, call, client, output, table, withAgentOpts } from './agentCli.js';

type NodeRow = ResponseBody<'getNode', 200>;

/** Pod CIDRs shown in a table cell; block IPAM can give a node hundreds. */
const CIDRS_IN_TABLE = 3;

/** How long ago, as kubectl prints ages: 42s, 7m, 5h, 3d. */
export function age(startedAt: string, now: number): string {
  const ms = now - Date.parse(startedAt);
  if (!Number.isFinite(ms)) return '-';
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  if (s < 120 * 60) return `${Math.floor(s / 60)}m`;
  if (s < 48 * 3600) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

function addressesText(n: NodeRow): string {
  const internal = n.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.ip);
  const router = n.addresses.filter((a) => a.type === 'RouterIP').map((a) => a.ip);
  return [...internal, ...router.map((ip) => `router ${ip}`)].join(', ') || '-';
}

function podCidrsText(n: NodeRow, all: boolean): string {
  if (n.podCidrs.length === 0) return '-';
  if (all || n.podCidrs.length <= CIDRS_IN_TABLE) return n.podCidrs.join(', ');
  return `${n.podCidrs.slice(0, CIDRS_IN_TABLE).join(', ')} (+${n.podCidrs.length - CIDRS_IN_TABLE} more)`;
}

function modeText(n: NodeRow): string {
  return n.tunnel ? `${n.routingMode} (${n.tunnel.protocol}:${n.tunnel.port})` : n.routingMode;
}

function healthText(n: NodeRow): string {
  return n.health.reason ? `${n.health.status}: ${n.health.reason}` : n.health.status;
}

/** This node, or whether this node has installed a remote node's routes and ipcache entries. */
function routesText(n: NodeRow): string {
  if (n.local) return 'local';
  return n.routesInstalled ? 'installed' : 'pending';
}

/** `tendril node list`: a node a line, as `cilium node list` does it, with what this node made of each. */
export function nodeTable(nodes: readonly NodeRow[], now: number): string {
  return table([
    ['NAME', 'ADDRESSES', 'POD CIDRS', 'MODE', 'HEALTH', 'ROUTES/LOCAL', 'AGE'],
    ...nodes.map((n) => [n.name, addressesText(n), podCidrsText(n, false), modeText(n), healthText(n), routesText(n), age(n.startedAt, now)]),
  ]);
}

/** `tendril node get`: one node, a field a line, every pod CIDR. */
export function nodeDetails(n: NodeRow, now: number): string {
  return table([
    ['Name', n.name + (n.local ? ' (this node)' : '')],
    ...n.addresses.map((a) => [a.type, a.ip]),
    ['Pod CIDRs', podCidrsText(n, true)],
    ['Routing mode', modeText(n)],
    ['Health', healthText(n)],
    ['Routes', n.local ? '-' : routesText(n)],
    ['Started', `${n.startedAt} (${age(n.startedAt, now)} ago)`],
    ['Flows', n.flows ? `${n.flows.tls ? 'https' : 'http'}://${n.flows.address}` : '-'],
    ['Revision', String(n.revision)],
  ]);
}

/** `tendril node …`: the cluster's nodes from the agent's node registry. */
export function registerNodeCommands(program: Command): void {
  const node = program.command('node').description('the cluster\'s nodes: list, get (from the node registry in the kvstore)');

  withAgentOpts(node.command('list').description('every node of the cluster, this one first, and whether this node has installed its routes')).action(async (opts: AgentOpts) => {
    const nodes = await call(() => client(opts).listNodes());
    await output(opts, nodes, () => nodeTable(nodes, Date.now()));
  });

  withAgentOpts(node.command('get <name>').description('one node')).action(async (name: string, opts: AgentOpts) => {
    const n = await call(() => client(opts).getNode(name));
    await output(opts, n, () => nodeDetails(n, Date.now()));
  });
}
