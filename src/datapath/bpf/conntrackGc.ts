/**
 * Conntrack garbage collection. The programs refresh an entry's deadline on
 * every packet but never delete: an entry whose deadline (expires_ns, on
 * CLOCK_MONOTONIC like bpf_ktime_get_ns) has passed is a closed or idle flow,
 * and the agent removes it here. The tables are LRU maps, so a full table
 * evicts by itself; GC keeps dead flows from pushing out live ones, and its
 * report says what went.
 */
import type { Logger } from '../../logging/logger.js';
import { existsSync } from 'node:fs';
import { type CtTable, ctRow, type CtRow, DatapathInspector } from './inspect.js';
import { MapName } from './constants.js';
import { ct4Key, ctEntry } from './layout.js';
import { collectNat, type NatGcResult } from './natGc.js';

export interface CtGcTableResult {
  /** Entries looked at. */
  scanned: number;
  /** Expired entries deleted. */
  removed: number;
}

export interface CtGcResult {
  tcp: CtGcTableResult;
  any: CtGcTableResult;
  durationMs: number;
  /** The first expired flows removed (at most `sampleSize`), for the log and the CLI. */
  sample: CtRow[];
  /** The SNAT mappings removed with the flows (absent where the SNAT map is not pinned). */
  nat?: NatGcResult;
}

export interface CtGcOptions {
  /** "Now" on CLOCK_MONOTONIC (default process.hrtime.bigint(), the clock bpf_ktime_get_ns reads). */
  nowNs?: bigint;
  /** How many removed flows to report (default 10). */
  sampleSize?: number;
}

/** One GC pass over both conntrack tables. */
export async function collectConntrack(inspector: DatapathInspector, opts: CtGcOptions = {}): Promise<CtGcResult> {
  const started = performance.now();
  const nowNs = opts.nowNs ?? process.hrtime.bigint();
  const sampleSize = opts.sampleSize ?? 10;
  const sample: CtRow[] = [];
  const result = { tcp: { scanned: 0, removed: 0 }, any: { scanned: 0, removed: 0 } };
  for (const table of ['tcp', 'any'] as const satisfies readonly CtTable[]) {
    const name = table === 'tcp' ? MapName.CT_TCP : MapName.CT_ANY;
    await inspector.withMap(name, ct4Key, ctEntry, async (m) => {
      // Collect, then delete: deleting during a hash walk restarts the walk.
      const expired: Buffer[] = [];
      for await (const [k, v] of m.raw.entries()) {
        result[table].scanned++;
        if (ctEntry.read(v, 0).expiresNs < nowNs) expired.push(Buffer.from(k));
      }
      for (const k of expired) {
        // A packet may have refreshed the flow since the walk read it: look again right before deleting.
        const current = m.raw.lookup(k);
        if (current === undefined) continue;
        const entry = ctEntry.read(current, 0);
        if (entry.expiresNs >= nowNs) continue;
        if (m.raw.delete(k)) {
          result[table].removed++;
          if (sample.length < sampleSize) sample.push(ctRow(table, ct4Key.read(k, 0), entry, nowNs));
        }
      }
    });
  }
  return { ...result, durationMs: Math.round((performance.now() - started) * 10) / 10, sample };
}

export interface ConntrackGcOptions {
  inspector: DatapathInspector;
  log: Logger;
  /** Time between passes (default 30 s). */
  intervalMs?: number;
}

export const DEFAULT_CT_GC_INTERVAL_MS = 30_000;

/** Runs collectConntrack on an interval, one pass at a time, logging what each removed. */
export class ConntrackGc {
  readonly #inspector: DatapathInspector;
  readonly #log: Logger;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<CtGcResult | undefined> | undefined;
  #stopped = false;
  /** What the last pass's SNAT GC did (undefined before one ran, or where the SNAT map is not pinned). */
  lastNat: NatGcResult | undefined;

  constructor(opts: ConntrackGcOptions) {
    this.#inspector = opts.inspector;
    this.#log = opts.log;
    this.#intervalMs = opts.intervalMs ?? DEFAULT_CT_GC_INTERVAL_MS;
  }

  start(): void {
    this.#stopped = false;
    this.#schedule();
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      void this.runOnce().finally(() => this.#schedule());
    }, this.#intervalMs);
    // GC alone never keeps the agent alive.
    this.#timer.unref();
  }

  /** One pass now (joins the running one if any); failures are logged and answered with undefined. */
  runOnce(): Promise<CtGcResult | undefined> {
    this.#running ??= this.#pass().finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  async #pass(): Promise<CtGcResult | undefined> {
    try {
      const r = await collectConntrack(this.#inspector);
      // SNAT mappings live as long as their flows: right after the flows that ended went.
      const nat = existsSync(this.#inspector.pinPath(MapName.SNAT)) ? await collectNat(this.#inspector) : undefined;
      this.lastNat = nat;
      const removed = r.tcp.removed + r.any.removed + (nat ? nat.removed + nat.orphans : 0);
      const fields = { tcp: r.tcp, any: r.any, ...(nat ? { nat } : {}), durationMs: r.durationMs };
      if (removed > 0) {
        this.#log.info({ ...fields, sample: r.sample.map((f) => `${f.table} ${f.saddr}:${f.sport} -> ${f.daddr}:${f.dport} proto ${f.proto}`) }, 'conntrack GC removed expired flows');
      } else {
        this.#log.debug(fields, 'conntrack GC: nothing expired');
      }
      return nat ? { ...r, nat } : r;
    } catch (err) {
      this.#log.warn({ err }, 'conntrack GC pass failed');
      return undefined;
    }
  }

  /** Stops the timer and waits for a pass under way. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }
}
