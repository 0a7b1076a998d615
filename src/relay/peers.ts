/**
 * Which nodes the relay reads: a static list (`--peer name=url`), or the
 * cluster's node registry (the kvstore's, or the TendrilNodes of the
 * Kubernetes API) followed while the relay runs, each node's flows address
 * as its record announces it. A node whose record announces none is still
 * a peer — one without an address, reported unavailable, never hidden.
 */
import { isNodeName, type NodeRecord, type NodeRegistryView } from '../node/index.js';
import { RelayConfigError } from './errors.js';

export interface RelayPeer {
  name: string;
  /** Where its flows are served (http: or https:); absent: the node serves none. */
  url?: URL;
  /** Why it has no address. */
  missing?: string;
}

/** The peers as they are now, and a call when they change. */
export interface PeerSource {
  start(): Promise<void>;
  list(): RelayPeer[];
  subscribe(listener: () => void): () => void;
  stop(): Promise<void>;
}

/** `name=http(s)://host:port`; throws RelayConfigError saying what is wrong. */
export function parsePeer(text: string): RelayPeer {
  const eq = text.indexOf('=');
  const name = eq < 0 ? '' : text.slice(0, eq);
  const url = eq < 0 ? '' : text.slice(eq + 1);
  if (!isNodeName(name) || !URL.canParse(url)) throw new RelayConfigError(`--peer "${text}": use name=http(s)://host:port, such as node-a=https://10.0.0.11:4245`);
  const u = new URL(url);
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new RelayConfigError(`--peer "${text}": the URL must be http:// or https://`);
  return { name, url: u };
}

export class StaticPeers implements PeerSource {
  readonly #peers: RelayPeer[];

  constructor(peers: RelayPeer[]) {
    const names = new Set<string>();
    for (const p of peers) {
      if (names.has(p.name)) throw new RelayConfigError(`--peer ${p.name} is given twice`);
      names.add(p.name);
    }
    this.#peers = peers;
  }

  async start(): Promise<void> {}

  list(): RelayPeer[] {
    return [...this.#peers];
  }

  subscribe(): () => void {
    return () => undefined;
  }

  async stop(): Promise<void> {}
}

/** A node's peer from its record. */
export function peerOfRecord(record: NodeRecord): RelayPeer {
  if (!record.flows) return { name: record.name, missing: 'the node serves no flows (its agent runs without --flows-listen-addr)' };
  return { name: record.name, url: new URL(`${record.flows.tls ? 'https' : 'http'}://${record.flows.address}`) };
}

/** A registry the relay follows without writing (NodeRegistry or KubernetesNodeRegistry in follow mode). */
export interface FollowedRegistry extends NodeRegistryView {
  follow(): Promise<void>;
  stop(): Promise<void>;
}

export class RegistryPeers implements PeerSource {
  readonly #listeners = new Set<() => void>();
  #unsubscribe: (() => void) | undefined;

  constructor(private readonly registry: FollowedRegistry) {}

  async start(): Promise<void> {
    await this.registry.follow();
    this.#unsubscribe = this.registry.subscribe(() => {
      for (const l of this.#listeners) l();
    });
  }

  list(): RelayPeer[] {
    return this.registry.list().map(peerOfRecord);
  }

  subscribe(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async stop(): Promise<void> {
    this.#unsubscribe?.();
    await this.registry.stop();
  }
}
