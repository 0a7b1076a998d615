import { ReservedIdentity } from '../identity/constants.js';
import { formatPrefix, tryParsePrefix } from '../netip/index.js';
import type { IPCache } from './ipcache.js';
import { IpcacheSource } from './source.js';

/** Owner of this node's own addresses in the ipcache. */
export function nodeAddressOwner(nodeName: string): string {
  return `node:${nodeName}`;
}

/**
 * This node's own addresses (router addresses, node IP, the addresses of its
 * interfaces) in the ipcache as identity `host`, source `local`, so the
 * datapath classifies traffic from the node as `host`. They mean `host` on
 * this node only: KvstoreIPCacheSync never publishes a `host` entry (other
 * nodes know these addresses as a remote node's).
 */
export class NodeAddressEntries {
  readonly #owner: string;
  readonly #held = new Set<string>();

  constructor(
    private readonly ipcache: IPCache,
    nodeName: string,
  ) {
    this.#owner = nodeAddressOwner(nodeName);
  }

  /** The addresses now held, as host prefixes (`/32`, `/128`). */
  get addresses(): string[] {
    return [...this.#held].sort();
  }

  /** Makes the node's entries exactly `addresses` (bare IPs); addresses that are not IPs are ignored. */
  set(addresses: Iterable<string>): void {
    const next = new Set<string>();
    for (const a of addresses) {
      const p = tryParsePrefix(a, { bareAddress: true });
      if (p !== undefined && p.length === (p.family === 4 ? 32 : 128)) next.add(formatPrefix(p));
    }
    for (const prefix of this.#held) {
      if (!next.has(prefix)) this.ipcache.delete(prefix, { source: IpcacheSource.Local, owner: this.#owner });
    }
    for (const prefix of next) {
      this.ipcache.upsert(prefix, { identity: ReservedIdentity.Host, source: IpcacheSource.Local, owner: this.#owner });
    }
    this.#held.clear();
    for (const p of next) this.#held.add(p);
  }

  /** Adds addresses to those held (a router address taken while running). */
  add(addresses: Iterable<string>): void {
    this.set([...this.#held.values()].map((p) => p.split('/')[0]!).concat([...addresses]));
  }
}
