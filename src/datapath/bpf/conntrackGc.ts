/**
 * Conntrack garbage collection. The programs refresh an entry's deadline on
 * every packet but never delete: an entry whose deadline (expires_ns, on
 * CLOCK_MONOTONIC like bpf_ktime_get_ns) has passed is a closed or idle flow,
 * and the GC removes it. The tables are plain hashes: a full one refuses new
 * flows, so the GC is what makes room. The walk is a BPF program
 * (gcProgram.ts, bpf/bpf_gc.c) run in the kernel on libuv's pool, never on
 * the agent's event loop; its report says what went and how full each
 * table is.
 */
import type { Logger } from '../../logging/logger.js';
import { existsSync } from 'node:fs';
import { type CtTable, ctRow, type CtRow, type DatapathInspector } from './inspect.js';
import { GcMap, MapName } from './constants.js';
import { GC_MAP_NAME, type GcMapValue, type GcProgram, withGcProgram } from './gcProgram.js';
import { DEFAULT_NAT_GC_GRACE_NS, type NatGcResult } from './natGc.js';

export interface CtGcTableResult {
  /** Entries looked at. */
  scanned: number;
  /** Expired entries deleted. */
  removed: number;
}

/** How full a map the GC walked was when its run ended. */
export interface MapFill {
  map: string;
  entries: number;
  maxEntries: number;
}

export interface CtGcResult {
  tcp: CtGcTableResult;
  any: CtGcTableResult;
  durationMs: number;
  /** The first expired flows removed (at most GC_SAMPLE_MAX), for the log and the CLI. */
  sample: CtRow[];
  /** The SNAT mappings removed with the flows (absent where the SNAT map is not pinned). */
  nat?: NatGcResult;
  /** Each walked map's entries after the pass. */
  fill: MapFill[];
}

export interface CtGcOptions {
  /** "Now" on CLOCK_MONOTONIC (default process.hrtime.bigint(), the clock bpf_ktime_get_ns reads). */
  nowNs?: bigint;
  /** SNAT mappings younger than this are left alone (default DEFAULT_NAT_GC_GRACE_NS). */
  natGraceNs?: bigint;
}

/** One GC pass over both conntrack tables (IPv4 and IPv6 maps), then the SNAT map where it is pinned (a mapping goes with its flow). */
export async function collectConntrack(inspector: DatapathInspector, opts: CtGcOptions = {}): Promise<CtGcResult> {
  const started = performance.now();
  const nowNs = opts.nowNs ?? process.hrtime.bigint();
  const sample: CtRow[] = [];
  const fill: MapFill[] = [];
  const result = { tcp: { scanned: 0, removed: 0 }, any: { scanned: 0, removed: 0 } };
  let nat: NatGcResult | undefined;
  // Asked before the load, which pins whatever the object declares.
  const hasSnat = existsSync(inspector.pinPath(MapName.SNAT));
  await withGcProgram(inspector, async (gc) => {
    // Each table's IPv4 and IPv6 maps count together under its name; each map's fill is its own.
    const tables: Array<[CtTable, GcMapValue, 4 | 6]> = [
      ['tcp', GcMap.CT_TCP, 4],
      ['any', GcMap.CT_ANY, 4],
      ['tcp', GcMap.CT6_TCP, 6],
      ['any', GcMap.CT6_ANY, 6],
    ];
    for (const [table, map, family] of tables) {
      const r = await gc.run({ map, nowNs });
      result[table].scanned += r.scanned;
      result[table].removed += r.removed;
      fill.push(mapFill(gc, map, r.entries));
      for (const s of r.sample.slice(0, r.samples)) sample.push(ctRow(table, family === 6 ? s.key6 : s.key, s.entry, nowNs));
    }
    if (hasSnat) {
      // Both families' mappings count together; each map's fill is its own.
      nat = { scanned: 0, removed: 0, orphans: 0 };
      for (const map of [GcMap.SNAT, GcMap.SNAT6] as const) {
        const r = await gc.run({ map, nowNs, graceNs: opts.natGraceNs ?? DEFAULT_NAT_GC_GRACE_NS });
        nat.scanned += r.scanned;
        nat.removed += r.mappings;
        nat.orphans += r.orphans;
        fill.push(mapFill(gc, map, r.entries));
      }
    }
  });
  return { ...result, durationMs: Math.round((performance.now() - started) * 10) / 10, sample, ...(nat ? { nat } : {}), fill };
}

function mapFill(gc: GcProgram, map: GcMapValue, entries: bigint): MapFill {
  const name = GC_MAP_NAME[map];
  return { map: name, entries: Number(entries), maxEntries: gc.maxEntries(name) };
}

export interface ConntrackGcOptions {
  inspector: DatapathInspector;
  log: Logger;
  /** Time between passes (default 30 s). */
  intervalMs?: number;
}

export const DEFAULT_CT_GC_INTERVAL_MS = 30_000;
/** The shortest time between passes, when a table is half full or more. */
export const MIN_CT_GC_INTERVAL_MS = 2_000;
/** A map this full is logged (once per crossing): new flows are close to being refused. */
export const MAP_FILL_WARNING = 0.9;

/**
 * The time to the next pass: the configured interval while every table is
 * under a quarter full, a quarter of it up to half, MIN_CT_GC_INTERVAL_MS
 * beyond (as Cilium shortens its GC interval as tables fill): a table that
 * fills refuses new flows, and only the GC makes room.
 */
export function nextGcIntervalMs(intervalMs: number, fill: readonly MapFill[]): number {
  const most = Math.max(0, ...fill.map((f) => (f.maxEntries > 0 ? f.entries / f.maxEntries : 0)));
  if (most >= 0.5) return Math.min(intervalMs, MIN_CT_GC_INTERVAL_MS);
  if (most >= 0.25) return Math.max(Math.min(intervalMs, MIN_CT_GC_INTERVAL_MS), Math.round(intervalMs / 4));
  return intervalMs;
}

/** Runs collectConntrack on an interval, one pass at a time, logging what each removed and a table crossing 90%. */
export class ConntrackGc {
  readonly #inspector: DatapathInspector;
  readonly #log: Logger;
  readonly #intervalMs: number;
  #nextMs: number;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<CtGcResult | undefined> | undefined;
  #stopped = false;
  /** Maps found at or above MAP_FILL_WARNING by the last pass. */
  readonly #nearlyFull = new Set<string>();
  /** What the last pass's SNAT GC did (undefined before one ran, or where the SNAT map is not pinned). */
  lastNat: NatGcResult | undefined;

  constructor(opts: ConntrackGcOptions) {
    this.#inspector = opts.inspector;
    this.#log = opts.log;
    this.#intervalMs = opts.intervalMs ?? DEFAULT_CT_GC_INTERVAL_MS;
    this.#nextMs = this.#intervalMs;
  }

  start(): void {
    this.#stopped = false;
    this.#schedule();
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      void this.runOnce().finally(() => this.#schedule());
    }, this.#nextMs);
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
      this.lastNat = r.nat;
      const nat = r.nat;
      const removed = r.tcp.removed + r.any.removed + (nat ? nat.removed + nat.orphans : 0);
      const fields = { tcp: r.tcp, any: r.any, ...(nat ? { nat } : {}), durationMs: r.durationMs };
      if (removed > 0) {
        this.#log.info({ ...fields, sample: r.sample.map((f) => `${f.table} ${f.saddr}:${f.sport} -> ${f.daddr}:${f.dport} proto ${f.proto}`) }, 'conntrack GC removed expired flows');
      } else {
        this.#log.debug(fields, 'conntrack GC: nothing expired');
      }
      this.#reportFill(r.fill);
      this.#nextMs = nextGcIntervalMs(this.#intervalMs, r.fill);
      return r;
    } catch (err) {
      this.#log.warn({ err }, 'conntrack GC pass failed');
      return undefined;
    }
  }

  #reportFill(fill: readonly MapFill[]): void {
    for (const f of fill) {
      const ratio = f.maxEntries > 0 ? f.entries / f.maxEntries : 0;
      const fields = { map: f.map, entries: f.entries, maxEntries: f.maxEntries, fill: Math.round(ratio * 1000) / 1000 };
      if (ratio >= MAP_FILL_WARNING && !this.#nearlyFull.has(f.map)) {
        this.#nearlyFull.add(f.map);
        this.#log.warn(fields, 'map over 90% full: new flows will be refused when it fills (raise its --bpf-*-max, or look for the flood)');
      } else if (ratio < MAP_FILL_WARNING && this.#nearlyFull.delete(f.map)) {
        this.#log.info(fields, 'map back under 90% full');
      }
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
