/**
 * Mirrors the agent's IPCache (its effective entries) into tendril_ipcache.
 * The pinned map outlives the agent, so at start it holds the previous run's
 * entries: they keep classifying packets while the agent restores, and
 * prune() removes those the IPCache no longer has once the restore is done.
 */
import type { IPCache, IpcacheEntry } from '../../ipcache/index.js';
import type { Logger } from '../../logging/logger.js';
import { formatPrefix, type IpPrefix, parseIp, tryParsePrefix } from '../../netip/index.js';
import { type BpfMap } from '../kernel/bpf/index.js';
import { type IpcacheValue } from './layout.js';

function prefixOf(text: string): IpPrefix | undefined {
  return tryParsePrefix(text, { bareAddress: true });
}

/**
 * A tunnel endpoint as the map holds it: an IPv4 address as a number, 0 for
 * none. An entry hosted by this very node (its own kvstore entries, which
 * outlive an endpoint until their lease or owner removes them) has none: a
 * stale address of this node must meet the host program's
 * UNKNOWN_ENDPOINT, not be tunnelled back to this node.
 */
function tunnelOf(hostIP: string | undefined, ownNodeIp: string | undefined): number {
  if (hostIP === undefined) return 0;
  const ip = parseIp(hostIP);
  if (ip.family !== 4) return 0;
  return ownNodeIp !== undefined && Number(parseIp(ownNodeIp).bits) === Number(ip.bits) ? 0 : Number(ip.bits);
}

export class IpcacheMapMirror {
  /** Prefixes written since this agent started (canonical text). */
  readonly #written = new Set<string>();
  #unsubscribe: (() => void) | undefined;
  #failures = 0;

  constructor(
    readonly map: BpfMap<IpPrefix, IpcacheValue>,
    private readonly log: Logger,
    /** This node's underlay address: entries it hosts get no tunnel endpoint. */
    private readonly ownNodeIp?: string,
  ) {}

  /** Subscribes with replay: every current entry is written now, later changes as they happen. */
  start(ipcache: IPCache): void {
    this.stop();
    this.#unsubscribe = ipcache.subscribe(
      {
        onUpsert: (entry) => this.#write(entry),
        onDelete: (previous) => this.#delete(previous),
      },
      { replay: true },
    );
  }

  stop(): void {
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
  }

  /** Writes that failed so far (each was logged). */
  get failures(): number {
    return this.#failures;
  }

  #write(entry: IpcacheEntry): void {
    const prefix = prefixOf(entry.prefix);
    if (!prefix) return;
    try {
      this.map.set(prefix, { identity: entry.identity, tunnelIp4: tunnelOf(entry.hostIP, this.ownNodeIp), flags: 0 });
      this.#written.add(formatPrefix(prefix));
    } catch (err) {
      this.#failures++;
      this.log.error({ err, prefix: entry.prefix, identity: entry.identity }, 'writing the datapath ipcache failed; packets from/to this prefix are classified by a shorter prefix or as world');
    }
  }

  #delete(previous: IpcacheEntry): void {
    const prefix = prefixOf(previous.prefix);
    if (!prefix) return;
    try {
      this.map.delete(prefix);
      this.#written.delete(formatPrefix(prefix));
    } catch (err) {
      this.#failures++;
      this.log.error({ err, prefix: previous.prefix }, 'deleting a datapath ipcache entry failed');
    }
  }

  /** Deletes pinned entries no IPCache entry wrote since start (a previous run's leftovers); answers how many. */
  async prune(): Promise<number> {
    const stale: IpPrefix[] = [];
    for await (const prefix of this.map.keys()) if (!this.#written.has(formatPrefix(prefix))) stale.push(prefix);
    for (const p of stale) this.map.delete(p);
    if (stale.length > 0) this.log.info({ removed: stale.map(formatPrefix) }, 'removed datapath ipcache entries the agent no longer has');
    return stale.length;
  }
}
