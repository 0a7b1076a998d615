import { formatPrefix, tryParseIp, tryParsePrefix } from '../../netip/index.js';
import { DatapathError, type NodeRoutingDatapath, type RemoteNodeRoute, type RoutingMode } from '../types.js';

export type FakeNodeRoutingOp = 'upsertRemoteNode' | 'removeRemoteNode' | 'pruneRemoteNodes';

/**
 * An in-memory NodeRoutingDatapath: the routes each remote node has, with
 * the real one's input checks (an IP next hop, an IPv6 one if any, canonical CIDRs) and
 * failure injection per operation, for tests of the logic above it.
 */
export class FakeNodeRouting implements NodeRoutingDatapath {
  /** Every call in order, with the node names it concerned. */
  readonly calls: Array<{ op: FakeNodeRoutingOp; names: string[] }> = [];
  readonly #routes = new Map<string, RemoteNodeRoute>();
  readonly #failures = new Map<FakeNodeRoutingOp, Error[]>();

  constructor(readonly mode: RoutingMode = 'tunnel') {}

  /** The next call of `op` fails with `err` (queued: call twice to fail two calls). */
  failNext(op: FakeNodeRoutingOp, err: Error = new DatapathError('failed', `fake: injected failure of ${op}`)): void {
    const list = this.#failures.get(op) ?? [];
    list.push(err);
    this.#failures.set(op, list);
  }

  /** Puts a node's routes in place behind the agent's back (routes an earlier run left). */
  seed(route: RemoteNodeRoute): void {
    this.#routes.set(route.name, { name: route.name, nodeIp: route.nodeIp, ...(route.nodeIp6 === undefined ? {} : { nodeIp6: route.nodeIp6 }), podCidrs: [...route.podCidrs] });
  }

  async upsertRemoteNode(node: RemoteNodeRoute): Promise<void> {
    this.#enter('upsertRemoteNode', [node.name]);
    if (tryParseIp(node.nodeIp) === undefined) throw new DatapathError('failed', `fake: node ${node.name}: next hop ${JSON.stringify(node.nodeIp)} is not an IP address`);
    if (node.nodeIp6 !== undefined && tryParseIp(node.nodeIp6)?.family !== 6) throw new DatapathError('failed', `fake: node ${node.name}: IPv6 next hop ${JSON.stringify(node.nodeIp6)} is not an IPv6 address`);
    for (const c of node.podCidrs) {
      const p = tryParsePrefix(c);
      if (p === undefined || formatPrefix(p) !== c) throw new DatapathError('failed', `fake: node ${node.name}: ${JSON.stringify(c)} is not a canonical CIDR`);
    }
    this.seed(node);
  }

  async removeRemoteNode(name: string): Promise<void> {
    this.#enter('removeRemoteNode', [name]);
    this.#routes.delete(name);
  }

  async pruneRemoteNodes(live: readonly string[]): Promise<void> {
    this.#enter('pruneRemoteNodes', [...live]);
    const keep = new Set(live);
    for (const name of [...this.#routes.keys()]) if (!keep.has(name)) this.#routes.delete(name);
  }

  remoteNodes(): ReadonlyMap<string, RemoteNodeRoute> {
    return new Map([...this.#routes].map(([name, r]) => [name, { ...r, podCidrs: [...r.podCidrs] }]));
  }

  #enter(op: FakeNodeRoutingOp, names: string[]): void {
    this.calls.push({ op, names });
    const err = this.#failures.get(op)?.shift();
    if (err !== undefined) throw err;
  }
}
