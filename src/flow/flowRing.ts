/**
 * The agent's flow history: the last `capacity` flows, oldest evicted first,
 * kept whether or not anyone listens. A flow that repeats while still held
 * (same event type and outcome, same peers and port, same rule) folds into
 * the one held: its count grows, its record becomes the latest, and it moves
 * to the newest end. For drops and refusals the source port is not part of
 * what repeats (a client retrying, or a flood from random ports, is one flow
 * dropped many times), so a flood takes one place and evicts nothing.
 *
 * Recording is on every event, reading is rare, so the history keeps what the
 * datapath wrote, not what people read: each flow is a slot holding its
 * latest record's bytes (one slab for all), the first record's timestamp,
 * a count, and what the record's numbers meant when it was read (EventRefs:
 * references to the agent's own labels, pods and rules, copied into an
 * object the slot keeps for good). An event therefore allocates no object the
 * history keeps, and a full history is no heap of event graphs for the
 * garbage collector to walk and move: that, and building the event, were
 * most of an event's cost. A flow is decoded and built when it is read.
 *
 * Slots are linked in recording order (a doubly linked list over typed
 * arrays): a folded flow moves to the newest end and the oldest is evicted,
 * both O(1). The fold key is the record's words less its length and time
 * (and less its source port unless forwarded): a table of their 32-bit
 * hashes finds the slot (no key object per flow), and every candidate is
 * checked against the words held, so flows whose hashes collide stay apart.
 */
import { randomInt } from 'node:crypto';
import { datapathEvent, EVENT_SIZE, eventFields } from '../datapath/bpf/layout.js';
import {
  buildEvent,
  copyEventRefs,
  EVENT_TYPE_NAMES,
  type EventRefs,
  newEventRefs,
  type RecordHeader,
  verdictName,
  wallClockOf,
} from '../monitor/index.js';
import { type Flow, flowVerdict, type FlowVerdict } from './types.js';

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

/** The clocks a flow's times are told with (CLOCK_MONOTONIC, as the records' timestamps, and the wall clock). */
export interface FlowClock {
  monoNs(): bigint;
  wallMs(): number;
}

const SYSTEM_CLOCK: FlowClock = { monoNs: () => process.hrtime.bigint(), wallMs: () => Date.now() };

const TS = eventFields.tsNs;
const LEN = eventFields.origLen;
const SPORT = eventFields.sport;
/** The record in 32-bit words, as its bytes read little-endian (whatever the host's order: the words only move and compare bytes). */
const WORDS = EVENT_SIZE / 4;
const LEN_WORD = LEN.offset / 4;
const SPORT_WORD = SPORT.offset / 4;
const TS_WORD = TS.offset / 4;
/** The source port's bytes are its word's first two: the low half read little-endian. */
const NO_SPORT_MASK = 0xffff0000;
// The words assume members as the C struct places them: length, source port and time each at a word's start, time last.
if (!(EVENT_SIZE % 4 === 0 && LEN.offset % 4 === 0 && LEN.codec.size === 4 && SPORT.offset % 4 === 0 && SPORT.codec.size === 2 && TS.offset % 4 === 0 && TS.offset + TS.codec.size === EVENT_SIZE)) {
  throw new Error('struct tendril_event: the flow history expects orig_len and sport to start a 32-bit word, and ts_ns last');
}

/** The verdict of a record's header. */
export function flowVerdictOfHeader(h: Readonly<RecordHeader>): FlowVerdict {
  return flowVerdict(EVENT_TYPE_NAMES[h.type]!, verdictName(h.subtype));
}

/**
 * The fold key's hash: every word of the record but its length and time, the
 * source port masked unless the flow was forwarded, mixed with a seed.
 * Pods choose much of what the words hold (ports, addresses): with a hash
 * anyone could compute, a pod could send flows whose hashes all land in one
 * run of the table and make every lookup walk it. The seed is random per
 * history, so such flows cannot be computed from outside.
 */
export type FoldHash = (words: Uint32Array, sportMask: number) => number;

function seededFoldHash(seed: number): FoldHash {
  return (words, sportMask) => {
    let h = seed | 0;
    for (let i = 0; i < TS_WORD; i++) {
      if (i === LEN_WORD) continue;
      h = Math.imul(h ^ (i === SPORT_WORD ? words[i]! & sportMask : words[i]!), 0x01000193);
      h ^= h >>> 15;
    }
    h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
    return (h ^ (h >>> 13)) | 0;
  };
}

const NONE = -1;

export class FlowRing {
  readonly capacity: number;
  readonly #node: string;
  readonly #clock: FlowClock;
  readonly #listeners = new Set<FlowListener>();
  /**
   * Slot by fold key hash: an open-addressing table (linear probing, slot + 1
   * per entry, 0 empty) at most half full, deletion by backward shift. A
   * `Map` would do, but with a flow evicted per event its deleted entries
   * make it rebuild its table every few thousand events: garbage the size of
   * the history, collected over and over.
   */
  readonly #table: Int32Array;
  readonly #tableMask: number;
  /** Each slot's fold key hash. */
  readonly #hashes: Int32Array;
  /** Each slot's latest record (and the view that moves its words). */
  readonly #records: Buffer;
  readonly #recordWords: DataView;
  /** Each slot's first timestamp, as the record holds it. */
  readonly #firstTs: Buffer;
  readonly #firstTsWords: DataView;
  /** The record being recorded, in words. */
  readonly #words = new Uint32Array(WORDS);
  readonly #counts: Float64Array;
  readonly #refs: EventRefs[] = [];
  /** Recording order: oldest at #head, newest at #tail. */
  readonly #prev: Int32Array;
  readonly #next: Int32Array;
  #head = NONE;
  #tail = NONE;
  /** Slots ever used: 0..#used-1. */
  #used = 0;
  /** Flows held. */
  #size = 0;
  #events = 0;
  #folded = 0;
  #evicted = 0;

  readonly #foldHash: FoldHash;

  /** `foldHash` replaces the seeded hash in tests (one that collides on purpose). */
  constructor(opts: { capacity: number; node: string; clock?: FlowClock; foldHash?: FoldHash }) {
    if (!Number.isInteger(opts.capacity) || opts.capacity < 1) throw new RangeError(`flow history capacity must be a positive integer, got ${opts.capacity}`);
    this.capacity = opts.capacity;
    this.#node = opts.node;
    this.#clock = opts.clock ?? SYSTEM_CLOCK;
    this.#foldHash = opts.foldHash ?? seededFoldHash(randomInt(0x7fffffff));
    this.#hashes = new Int32Array(opts.capacity);
    let size = 16;
    while (size < opts.capacity * 2) size *= 2;
    this.#table = new Int32Array(size);
    this.#tableMask = size - 1;
    this.#records = Buffer.alloc(opts.capacity * EVENT_SIZE);
    this.#recordWords = new DataView(this.#records.buffer, this.#records.byteOffset, this.#records.byteLength);
    this.#firstTs = Buffer.alloc(opts.capacity * 8);
    this.#firstTsWords = new DataView(this.#firstTs.buffer, this.#firstTs.byteOffset, this.#firstTs.byteLength);
    this.#counts = new Float64Array(opts.capacity);
    this.#prev = new Int32Array(opts.capacity);
    this.#next = new Int32Array(opts.capacity);
  }

  /** The node whose flows these are. */
  get node(): string {
    return this.#node;
  }

  /** Records one event (the monitor hub's recorder): the record's bytes and refs are copied. */
  record(record: Buffer, header: Readonly<RecordHeader>, refs: Readonly<EventRefs>): void {
    this.#events++;
    const words = this.#words;
    for (let i = 0; i < WORDS; i++) words[i] = record.readUInt32LE(i * 4);
    const sportMask = flowVerdictOfHeader(header) === 'forwarded' ? 0xffffffff : NO_SPORT_MASK;
    const hash = this.#foldHash(words, sportMask);
    let slot = this.#find(hash, sportMask);
    if (slot !== NONE) {
      this.#folded++;
      this.#counts[slot]!++;
      this.#unlink(slot);
    } else {
      if (this.#used < this.capacity) {
        slot = this.#used++;
        this.#refs.push(newEventRefs());
      } else {
        slot = this.#head;
        this.#unlink(slot);
        this.#unindex(slot);
        this.#evicted++;
      }
      this.#hashes[slot] = hash;
      this.#index(slot, hash);
      this.#counts[slot] = 1;
      this.#size++;
      this.#firstTsWords.setUint32(slot * 8, words[TS_WORD]!, true);
      this.#firstTsWords.setUint32(slot * 8 + 4, words[TS_WORD + 1]!, true);
    }
    const base = slot * EVENT_SIZE;
    for (let i = 0; i < WORDS; i++) this.#recordWords.setUint32(base + i * 4, words[i]!, true);
    copyEventRefs(refs, this.#refs[slot]!);
    this.#append(slot);
    if (this.#listeners.size > 0) {
      const flow = this.#flowAt(slot, this.#clock.monoNs(), this.#clock.wallMs());
      for (const l of this.#listeners) l(flow);
    }
  }

  /** The slot holding the flow of the record in #words, or NONE. */
  #find(hash: number, sportMask: number): number {
    const table = this.#table;
    for (let i = hash & this.#tableMask; table[i] !== 0; i = (i + 1) & this.#tableMask) {
      const slot = table[i]! - 1;
      if (this.#hashes[slot] === hash && this.#sameFlow(slot, sportMask)) return slot;
    }
    return NONE;
  }

  #index(slot: number, hash: number): void {
    const table = this.#table;
    let i = hash & this.#tableMask;
    while (table[i] !== 0) i = (i + 1) & this.#tableMask;
    table[i] = slot + 1;
  }

  /** Takes the slot out of the table, shifting back the entries after it that probed past it. */
  #unindex(slot: number): void {
    const table = this.#table;
    const mask = this.#tableMask;
    let i = this.#hashes[slot]! & mask;
    while (table[i] !== slot + 1) i = (i + 1) & mask;
    for (let j = (i + 1) & mask; table[j] !== 0; j = (j + 1) & mask) {
      const home = this.#hashes[table[j]! - 1]! & mask;
      // The entry at j may move to i only if its home is not in (i, j] (cyclically).
      const between = i <= j ? home > i && home <= j : home > i || home <= j;
      if (between) continue;
      table[i] = table[j]!;
      i = j;
    }
    table[i] = 0;
    this.#size--;
  }

  /** Whether the slot holds the flow of the record in #words: every word of the fold key equal. */
  #sameFlow(slot: number, sportMask: number): boolean {
    const words = this.#words;
    const base = slot * EVENT_SIZE;
    for (let i = 0; i < TS_WORD; i++) {
      if (i === LEN_WORD) continue;
      const mask = i === SPORT_WORD ? sportMask : 0xffffffff;
      if (((this.#recordWords.getUint32(base + i * 4, true) ^ words[i]!) & mask) !== 0) return false;
    }
    return true;
  }

  #unlink(slot: number): void {
    const p = this.#prev[slot]!;
    const n = this.#next[slot]!;
    if (p === NONE) this.#head = n;
    else this.#next[p] = n;
    if (n === NONE) this.#tail = p;
    else this.#prev[n] = p;
  }

  #append(slot: number): void {
    this.#prev[slot] = this.#tail;
    this.#next[slot] = NONE;
    if (this.#tail === NONE) this.#head = slot;
    else this.#next[this.#tail] = slot;
    this.#tail = slot;
  }

  /** The flow a slot holds, decoded and built now (times told against one clock reading per listing). */
  #flowAt(slot: number, nowMonoNs: bigint, nowWallMs: number): Flow {
    const e = datapathEvent.read(this.#records, slot * EVENT_SIZE);
    const event = buildEvent(e, this.#refs[slot]!, nowMonoNs, nowWallMs);
    const firstTs = TS.codec.read(this.#firstTs, slot * 8);
    return {
      node: this.#node,
      verdict: flowVerdict(event.type, event.verdict),
      count: this.#counts[slot]!,
      firstTime: wallClockOf(firstTs, nowMonoNs, nowWallMs).toISOString(),
      event,
    };
  }

  /** The flows held, oldest first, that pass `accept`; with `last`, only the newest `last` of those. */
  list(accept: (f: Flow) => boolean = () => true, last?: number): Flow[] {
    const mono = this.#clock.monoNs();
    const wall = this.#clock.wallMs();
    const out: Flow[] = [];
    if (last === undefined) {
      for (let s = this.#head; s !== NONE; s = this.#next[s]!) {
        const f = this.#flowAt(s, mono, wall);
        if (accept(f)) out.push(f);
      }
      return out;
    }
    for (let s = this.#tail; s !== NONE && out.length < last; s = this.#prev[s]!) {
      const f = this.#flowAt(s, mono, wall);
      if (accept(f)) out.push(f);
    }
    return out.reverse();
  }

  /** Called with every flow recorded from now on (a folded one with its new count), until the returned function is called. */
  listen(listener: FlowListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  stats(): FlowRingStats {
    return { capacity: this.capacity, size: this.#size, events: this.#events, folded: this.#folded, evicted: this.#evicted };
  }
}
