/**
 * /v1/node: the cluster's nodes as this node sees them, from the node
 * registry (each node's own record in the kvstore), with the kvstore revision
 * of the record this node last saw and whether it has installed the node's
 * routes and ipcache entries (RemoteNodes).
 */
import type { FastifyInstance } from 'fastify';
import { AgentError } from '../errors.js';
import type { PathParams, ResponseBody } from '../types.js';
import type { NodeRecord, NodeRegistryView, NodeStatus } from '../../node/types.js';

/** What the routes read: the registry, the revisions it saw, and what RemoteNodes installed. */
export interface NodeApi {
  /** This agent's node. */
  readonly nodeName: string;
  readonly registry: NodeRegistryView & { revisionOf(name: string): number | undefined };
  /** Whether this node has installed the remote node's routes and ipcache entries. */
  routesInstalled(name: string): boolean;
}

/** A record as GET /node answers it. */
export function nodeStatus(api: NodeApi, record: NodeRecord): NodeStatus {
  const local = record.name === api.nodeName;
  return {
    name: record.name,
    addresses: record.addresses.map((a) => ({ type: a.type, ip: a.ip })),
    podCidrs: [...record.podCidrs],
    routingMode: record.routingMode,
    ...(record.tunnel ? { tunnel: { protocol: record.tunnel.protocol, port: record.tunnel.port } } : {}),
    health: { status: record.health.status, ...(record.health.reason !== undefined ? { reason: record.health.reason } : {}) },
    startedAt: record.startedAt,
    ...(record.flows ? { flows: { address: record.flows.address, tls: record.flows.tls } } : {}),
    local,
    revision: api.registry.revisionOf(record.name) ?? 0,
    ...(local ? {} : { routesInstalled: api.routesInstalled(record.name) }),
  };
}

/** Body of the document's NodeStatus (the types are the same shape; this keeps the route honest if they drift). */
function body(s: NodeStatus): ResponseBody<'getNode', 200> {
  return s;
}

export function registerNodeRoutes(app: FastifyInstance, nodes: NodeApi | undefined): void {
  app.get('/v1/node', async (): Promise<ResponseBody<'listNodes', 200>> => {
    if (!nodes) return [];
    // The local node first, then by name: a stable order for tables and tests.
    const records = [...nodes.registry.list()].sort((a, b) => Number(b.name === nodes.nodeName) - Number(a.name === nodes.nodeName) || a.name.localeCompare(b.name));
    return records.map((r) => body(nodeStatus(nodes, r)));
  });

  app.get('/v1/node/:name', async (req): Promise<ResponseBody<'getNode', 200>> => {
    const { name } = req.params as PathParams<'getNode'>;
    const record = nodes?.registry.get(name);
    if (!record) throw new AgentError('NOT_FOUND', `node ${name} not found in the node registry`);
    return body(nodeStatus(nodes!, record));
  });
}
