/**
 * Mirrors the agent's IPCache (its effective entries) into tendril_ipcache.
 * The pinned map outlives the agent, so at start it holds the previous run's
 * entries: they keep classifying packets while the agent restores, and
 * prune() removes those the IPCache no longer has once the restore is done.
 * A write or delete that fails (a full map) is retried with the agent's one
 * back-off until it lands, always with the prefix's newest value: a reused
 * address must not keep the identity of the pod that had it before.
 */
import type { IPCache, IpcacheEntry } from '../../ipcache/index.js';
import type { Logger } from '../../logging/logger.js';
import { formatPrefix, type IpPrefix, tryParseIp, tryParsePrefix } from '../../netip/index.js';
import { type BpfMap } from '../kernel/bpf/index.js';
import { type IpcacheValue } from './layout.js';
import { Backoff, type BackoffOptions } from '../../async/backoff.js';

function prefixOf(text: string): IpPrefix | undefined {
  return tryParsePrefix(text, { bareAddress: true });
}

/**
 * A tunnel endpoint as the map holds it: the hosting node's address (its
 * node IP, the entry's hostIP) in the member of its family — tunnelIp4 as
 * a number, or tunnelIp6 for a node on an IPv6 underlay; neither for none.
 * The family is the hosting node's: a node whose node IP is IPv6 is reached
 * over IPv6, whatever the inner packet's family. An entry hosted by this
 * very node (its own kvstore entries, which outlive an endpoint until their
 * lease or owner removes them) has none: a stale address of this node must
 * meet the host program's UNKNOWN_ENDPOINT, not be tunnelled back to this
 * node.
 */
function tunnelOf(hostIP: string | undefined, ownNodeIp: string | undefined): Pick<IpcacheValue, 'tunnelIp4' | 'tunnelIp6'> {
  const ip = hostIP === undefined ? undefined : tryParseIp(hostIP);
  const own = ownNodeIp === undefined ? undefined : tryParseIp(ownNodeIp);
  if (ip === undefined || (own !== undefined && own.family === ip.family && own.bits === ip.bits)) return { tunnelIp4: 0 };
  return ip.family === 4 ? { tunnelIp4: Number(ip.bits) } : { tunnelIp4: 0, tunnelIp6: ip };
}

/** How a failed ipcache map write is retried by default: soon, then up to every 5 s until it lands. */
export const IPCACHE_RETRY: BackoffOptions = Object.freeze({ initialMs: 100, maxMs: 5000 });

/** Failed ipcache map writes: how many failed so far (retries not counted), how many prefixes still wait for a retry. */
export interface IpcacheWriteStats {
  readonly failed: number;
  readonly pending: number;
}

/**
 * What a prefix should hold: a value, or nothing (deleted). `text` is the
 * prefix's canonical text, the IpcacheEntry's own string: #written keeps
 * that one instead of a copy per prefix (64 bytes of each remote pod's).
 */
type Desired = { prefix: IpPrefix; text: string; value: IpcacheValue | undefined };

/** The entry's own text when it is the canonical one (the IPCache writes it so), else the canonical text. */
function canonicalText(prefix: IpPrefix, text: string): string {
  const canonical = formatPrefix(prefix);
  return canonical === text ? text : canonical;
}

export class IpcacheMapMirror {
  /** Prefixes written since this agent started (canonical text). */
  readonly #written = new Set<string>();
  /**
   * Prefixes whose last write or delete failed, with what they should hold
   * now. A later change of the prefix replaces it, so a retry writes only the
   * newest wish: a delete after a failed write is never undone by the retry.
   */
  readonly #pending = new Map<string, Desired>();
  readonly #backoff: Backoff;
  #retryTimer: NodeJS.Timeout | undefined;
  #unsubscribe: (() => void) | undefined;
  #failures = 0;

  constructor(
    readonly map: BpfMap<IpPrefix, IpcacheValue>,
    private readonly log: Logger,
    /** This node's underlay address: entries it hosts get no tunnel endpoint. */
    private readonly ownNodeIp?: string,
    retry: BackoffOptions = IPCACHE_RETRY,
  ) {
    this.#backoff = new Backoff(retry);
  }

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
    this.#scheduleRetry();
  }

  stop(): void {
    this.#unsubscribe?.();
    this.#unsubscribe = undefined;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
  }

  /** Writes and deletes the IPCache asked for that failed (each logged, then retried until it landed), and the prefixes still waiting. */
  writeStats(): IpcacheWriteStats {
    return { failed: this.#failures, pending: this.#pending.size };
  }

  #write(entry: IpcacheEntry): void {
    const prefix = prefixOf(entry.prefix);
    if (!prefix) return;
    this.#apply({ prefix, text: canonicalText(prefix, entry.prefix), value: { identity: entry.identity, ...tunnelOf(entry.hostIP, this.ownNodeIp), flags: 0 } });
  }

  #delete(previous: IpcacheEntry): void {
    const prefix = prefixOf(previous.prefix);
    if (!prefix) return;
    this.#apply({ prefix, text: canonicalText(prefix, previous.prefix), value: undefined });
  }

  /** Puts one prefix in its desired state; a failure is left for the retry, and counted and logged unless it was a retry's. */
  #apply(d: Desired, retry = false): boolean {
    const text = d.text;
    try {
      if (d.value !== undefined) {
        this.map.set(d.prefix, d.value);
        this.#written.add(text);
      } else {
        this.map.delete(d.prefix);
        this.#written.delete(text);
      }
      this.#pending.delete(text);
      return true;
    } catch (err) {
      this.#pending.set(text, d);
      // A retry that fails again is neither counted nor logged: a full map retried every few seconds must not flood either.
      if (!retry) {
        this.#failures++;
        if (d.value !== undefined) this.log.error({ err, prefix: text, identity: d.value.identity }, 'writing the datapath ipcache failed; retrying until it lands, meanwhile packets from/to this prefix are classified by a shorter prefix or as world');
        else this.log.error({ err, prefix: text }, 'deleting a datapath ipcache entry failed; retrying until it lands');
      }
      this.#scheduleRetry();
      return false;
    }
  }

  #scheduleRetry(): void {
    if (this.#retryTimer !== undefined || this.#pending.size === 0 || this.#unsubscribe === undefined) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      this.#retryPending();
    }, this.#backoff.next());
    this.#retryTimer.unref();
  }

  #retryPending(): void {
    let landed = 0;
    for (const d of [...this.#pending.values()]) if (this.#apply(d, true)) landed++;
    if (landed > 0) this.log.info({ landed, pending: this.#pending.size }, 'datapath ipcache writes that had failed landed');
    if (this.#pending.size === 0) this.#backoff.reset();
    else this.#scheduleRetry();
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
