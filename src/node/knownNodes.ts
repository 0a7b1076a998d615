import type { Logger } from '../logging/logger.js';
import type { NodeChange, NodeRecord } from './types.js';

/** A record as a registry last saw it. */
export interface KnownNode {
  record: NodeRecord;
  /** Canonical JSON: equal text, nothing changed for consumers. */
  text: string;
  revision: number;
}

/**
 * What every node registry keeps alike, whatever it reads (the kvstore,
 * the API server): the nodes it lists, the answers about them with the
 * node's own record taking precedence, and the subscribers.
 */
export class KnownNodes {
  /** Other writers' records as last seen (the own one too, as read back). */
  readonly nodes = new Map<string, KnownNode>();
  readonly #listeners = new Set<(change: NodeChange) => void>();

  constructor(
    private readonly nodeName: string,
    private readonly log: Logger | undefined,
  ) {}

  /** Every node by name; `own` (while the registry runs) is the truth for this node, also while its write is on the way. */
  list(own: NodeRecord | undefined): NodeRecord[] {
    const out = new Map([...this.nodes].map(([name, k]) => [name, k.record]));
    if (own !== undefined) out.set(this.nodeName, own);
    return [...out.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  get(name: string, own: NodeRecord | undefined): NodeRecord | undefined {
    if (name === this.nodeName && own !== undefined) return own;
    return this.nodes.get(name)?.record;
  }

  /** The revision of a node's record as last seen; for this node, as last written when later (0: never). */
  revisionOf(name: string, ownRevision: number): number | undefined {
    const seen = this.nodes.get(name)?.revision;
    if (name !== this.nodeName || ownRevision === 0) return seen;
    return Math.max(seen ?? 0, ownRevision);
  }

  subscribe(listener: (change: NodeChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Tells every subscriber; one that throws is logged and does not stop the others. */
  emit(change: NodeChange): void {
    for (const l of this.#listeners) {
      try {
        l(change);
      } catch (err) {
        this.log?.error({ err, node: change.node.name, change: change.type }, 'node registry subscriber threw');
      }
    }
  }
}
