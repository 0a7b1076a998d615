/**
 * The agent's flow history: the last `capacity` flows, oldest evicted first,
 * kept whether or not anyone listens. A flow that repeats while still held
 * (same event type and outcome, same peers and port, same rule) folds into
 * the one held: its count grows, its event becomes the latest, and it moves
 * to the newest end. For drops and refusals the source port is not part of
 * what repeats (a client retrying, or a flood from random ports, is one flow
 * dropped many times), so a flood takes one place and evicts nothing.
 *
 * A Map keeps insertion order, which is the time order here: a folded flow is
 * deleted and inserted again. Eviction does not take the Map's first key:
 * V8 leaves a deleted entry as a hole until the table is rebuilt, and walking
 * to the first live key crosses every hole before it, thousands per event in
 * a full history. A queue of (key, flow) in recording order says which flow
 * is oldest instead: an entry whose flow is no longer the one held under its
 * key (it folded since, or went) is skipped, and the queue is rebuilt from the
 * Map when such entries make it twice the capacity. Each event costs one key
 * built, one lookup and at most one eviction, all O(1) amortized.
 */
import type { MonitorEvent } from '../monitor/index.js';
import { type Flow, flowVerdictOf } from './types.js';

export interface FlowRingStats {
  capacity: number;
  /** Flows held now. */
  size: number;
  /** Events recorded since start. */
  events: number;
  /** Events that folded into a flow already held. */
  folded: number;
  /** Flows evicted to make room. */
  evicted: number;
}

export type FlowListener = (flow: Flow) => void;

/** The identity of a flow for folding repeats (the UI keys the flows it holds by the same, so a folded flow sent again replaces its older self). */
export function foldKey(e: MonitorEvent, verdict: string): string {
  const s = e.source;
  const d = e.destination;
  // A dropped flow's retries and a flood's random ports are one flow; a forwarded one is its connection.
  const sport = verdict === 'forwarded' ? s.port : '*';
  const outcome = e.type === 'drop' ? e.drop?.code : e.type === 'trace' ? e.tracePoint : e.verdict;
  return `${e.type}|${outcome}|${verdict}|${e.direction}|${e.protocol}|${s.identity}|${s.ip}|${sport}|${d.identity}|${d.ip}|${d.port}|${e.rule?.cookie ?? ''}|${e.interface.ifindex}|${e.tcpFlags?.join(',') ?? ''}`;
}

export class FlowRing {
  readonly capacity: number;
  readonly #node: string;
  readonly #flows = new Map<string, Flow>();
  readonly #listeners = new Set<FlowListener>();
  /** Recording order: keys[i] was recorded as flows[i]; live from `#head`. */
  #queueKeys: string[] = [];
  #queueFlows: Flow[] = [];
  #head = 0;
  #events = 0;
  #folded = 0;
  #evicted = 0;

  constructor(opts: { capacity: number; node: string }) {
    if (!Number.isInteger(opts.capacity) || opts.capacity < 1) throw new RangeError(`flow history capacity must be a positive integer, got ${opts.capacity}`);
    this.capacity = opts.capacity;
    this.#node = opts.node;
  }

  /** The node whose flows these are. */
  get node(): string {
    return this.#node;
  }

  /** Records one event; returns the flow it is now part of. */
  record(e: MonitorEvent): Flow {
    this.#events++;
    const verdict = flowVerdictOf(e);
    const key = foldKey(e, verdict);
    const held = this.#flows.get(key);
    let flow: Flow;
    if (held !== undefined) {
      this.#folded++;
      this.#flows.delete(key);
      flow = { node: held.node, verdict, count: held.count + 1, firstTime: held.firstTime, event: e };
    } else {
      flow = { node: this.#node, verdict, count: 1, firstTime: e.time, event: e };
      if (this.#flows.size >= this.capacity) this.#evictOldest();
    }
    this.#flows.set(key, flow);
    this.#queueKeys.push(key);
    this.#queueFlows.push(flow);
    if (this.#queueKeys.length - this.#head > 2 * this.capacity + 16) this.#rebuildQueue();
    for (const l of this.#listeners) l(flow);
    return flow;
  }

  #evictOldest(): void {
    const keys = this.#queueKeys;
    while (this.#head < keys.length) {
      const key = keys[this.#head]!;
      const flow = this.#queueFlows[this.#head]!;
      this.#head++;
      if (this.#flows.get(key) === flow) {
        this.#flows.delete(key);
        this.#evicted++;
        break;
      }
    }
    // Drop the consumed front now and then, not per event.
    if (this.#head > this.capacity) this.#rebuildQueue();
  }

  /** The queue anew from the Map (insertion order is recording order): only the flows held. */
  #rebuildQueue(): void {
    this.#queueKeys = [...this.#flows.keys()];
    this.#queueFlows = [...this.#flows.values()];
    this.#head = 0;
  }

  /** The flows held, oldest first, that pass `accept`; with `last`, only the newest `last` of those. */
  list(accept: (f: Flow) => boolean = () => true, last?: number): Flow[] {
    if (last === undefined) {
      const out: Flow[] = [];
      for (const f of this.#flows.values()) if (accept(f)) out.push(f);
      return out;
    }
    if (last <= 0) return [];
    // Newest first until `last` are found: a Map cannot be walked backwards, so walk a snapshot of its values.
    const all = [...this.#flows.values()];
    const out: Flow[] = [];
    for (let i = all.length - 1; i >= 0 && out.length < last; i--) if (accept(all[i]!)) out.push(all[i]!);
    return out.reverse();
  }

  /** Called with every flow recorded from now on (a folded one with its new count), until the returned function is called. */
  listen(listener: FlowListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  stats(): FlowRingStats {
    return { capacity: this.capacity, size: this.#flows.size, events: this.#events, folded: this.#folded, evicted: this.#evicted };
  }
}
