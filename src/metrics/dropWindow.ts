/**
 * Drops in the last minute, for `tendril status`. The datapath's drop
 * counters only grow (per-CPU, since the maps were created), so the agent
 * samples them on a timer and a status answers with the difference between
 * now and the oldest sample still inside the window. Before the agent has
 * run a minute the window is shorter and says so (`windowSeconds`).
 */
import { MetricsReason } from '../datapath/bpf/constants.js';
import type { MetricsRow } from '../datapath/bpf/inspect.js';
import type { Logger } from '../logging/logger.js';

export interface DropCount {
  reason: string;
  packets: number;
}

export interface RecentDrops {
  /** Seconds the counts cover: 60 once the agent has sampled that long, fewer before. */
  windowSeconds: number;
  total: number;
  /** The commonest reasons, most packets first. */
  topReasons: DropCount[];
}

interface Sample {
  atMs: number;
  byReason: Map<string, number>;
}

const WINDOW_MS = 60_000;
const SAMPLE_EVERY_MS = 10_000;
const TOP_REASONS = 3;

function dropsByReason(rows: readonly MetricsRow[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of rows) {
    if (r.reason === MetricsReason.FORWARDED || r.reason === MetricsReason.EVENTS_LOST) continue;
    out.set(r.reasonName, (out.get(r.reasonName) ?? 0) + r.packets);
  }
  return out;
}

export class DropWindow {
  readonly #samples: Sample[] = [];
  #timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly counters: () => Promise<MetricsRow[]>,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  /** Takes the first sample (the start of the first window) and samples every 10 s from then on. */
  async start(): Promise<void> {
    await this.#sample();
    this.#timer = setInterval(() => {
      this.#sample().catch((err: unknown) => this.log.warn({ err }, 'sampling the datapath\'s drop counters failed'));
    }, SAMPLE_EVERY_MS);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Drops since the oldest sample within the last minute, counted now. */
  async recent(): Promise<RecentDrops> {
    const current = await this.#sample();
    const base = this.#samples[0] ?? current;
    const topReasons: DropCount[] = [];
    let total = 0;
    for (const [reason, n] of current.byReason) {
      // A counter below its sample means the map was created anew: all it holds is recent.
      const before = base.byReason.get(reason) ?? 0;
      const packets = n >= before ? n - before : n;
      if (packets === 0) continue;
      total += packets;
      topReasons.push({ reason, packets });
    }
    topReasons.sort((a, b) => b.packets - a.packets || a.reason.localeCompare(b.reason));
    return { windowSeconds: Math.round((current.atMs - base.atMs) / 1000), total, topReasons: topReasons.slice(0, TOP_REASONS) };
  }

  async #sample(): Promise<Sample> {
    const s = { atMs: this.now(), byReason: dropsByReason(await this.counters()) };
    this.#samples.push(s);
    // Keep the newest sample at or before the window's start: it is the baseline of a full minute.
    while (this.#samples.length > 1 && this.#samples[1]!.atMs <= s.atMs - WINDOW_MS) this.#samples.shift();
    return s;
  }
}
