/**
 * Fans the datapath's events out to monitor clients. Once started (the
 * agent starts it with the datapath) the ring buffer is read all the time,
 * clients or not: a record the kernel cannot reserve is counted under
 * EVENTS_LOST, and that count must mean "a reader fell behind", not "nobody
 * was watching" (which, read only on demand, it did for every event between
 * two monitor sessions). With a recorder (the agent's flow history and flow
 * metrics) every record's header is read in place and what its numbers mean
 * taken by reference (eventRefs.ts), and both handed to the recorder, which
 * keeps the bytes: nothing is decoded or built for an event nobody reads.
 * Without one, records nobody subscribed to are counted and dropped before
 * any of that, so an idle reader costs a wakeup per batch. For clients each
 * record is decoded and built once, then handed to every client whose
 * filter it passes.
 */
import { Serializer } from '../async/keyedSerializer.js';
import type { Logger } from '../logging/logger.js';
import { RawMap, RingBufferReader } from '../datapath/kernel/bpf/index.js';
import { buildEvent, decodeRecord, type MonitorContext } from './decode.js';
import { captureRefs, type EventRefs, newEventRefs, newRecordHeader, readRecordHeader, type RecordHeader } from './eventRefs.js';
import { matchesFilter } from './filter.js';
import type { MonitorEvent, MonitorFilter } from './types.js';

/** Where records come from: the pinned ring buffer, in the agent. */
export interface EventSource {
  /** Starts delivering records; throws when the source cannot be opened. */
  open(onRecords: (records: Buffer[]) => void, onError: (err: unknown) => void): { stop(): Promise<void> };
}

/**
 * How long the reader lets records gather after each drain (ms). Read one at
 * a time, a busy node's events cost a thread wakeup and a call into
 * JavaScript each (most of what reading cost, recording or not); 5 ms
 * gathers a busy node's events by the hundred, is nothing to a person
 * watching, and at a million events a second fills a tenth of the 4 MiB
 * ring.
 */
export const MONITOR_COALESCE_MS = 5;

/** The ring buffer pinned at `pinPath`, opened afresh for each reading period. */
export function pinnedRingBuffer(pinPath: string): EventSource {
  return {
    open(onRecords, onError) {
      const map = RawMap.openPinned(pinPath, { type: 'RINGBUF' });
      let reader: RingBufferReader;
      try {
        // The API server keeps the agent alive; a reader alone must not.
        reader = RingBufferReader.open(map, onRecords, { onError, keepAlive: false, coalesceMs: MONITOR_COALESCE_MS });
      } catch (err) {
        map.close();
        throw err;
      }
      return {
        stop: async () => {
          try {
            // Held while stopping, so the event loop waits for the thread to finish.
            reader.ref();
            await reader.stop();
          } finally {
            map.close();
          }
        },
      };
    },
  };
}

/**
 * Takes every record of a known type, with its header and what its numbers
 * meant when it was read. The header and refs are the reader's own, reused
 * for the next record: a recorder copies what it keeps. It must not throw.
 */
export type EventRecorder = (record: Buffer, header: Readonly<RecordHeader>, refs: Readonly<EventRefs>) => void;

export interface MonitorSubscription {
  /** Leaves the hub; the last one out stops the reader. */
  close(): Promise<void>;
}

interface Subscriber {
  filter: MonitorFilter;
  /**
   * When the client came (CLOCK_MONOTONIC, as the events' timestamps): the
   * ring keeps what nobody read, and a new client must not get that backlog
   * as if it were happening now.
   */
  since: bigint;
  onEvent(e: MonitorEvent): void;
  /** The hub ends the subscription itself (the reader failed, the agent stops). */
  onEnd(reason: string): void;
}

export interface MonitorHubStats {
  subscribers: number;
  reading: boolean;
  records: number;
  /** Records that were no event this agent can decode (short, unknown family or type). */
  undecodable: number;
  /** Records older than every client (left in the ring while nobody read it). */
  stale: number;
}

export class MonitorHub {
  readonly #source: EventSource;
  readonly #context: MonitorContext;
  readonly #log: Logger;
  readonly #record: EventRecorder | undefined;
  readonly #header = newRecordHeader();
  readonly #refs = newEventRefs();
  readonly #subscribers = new Set<Subscriber>();
  #reader: { stop(): Promise<void> } | undefined;
  /** start() was called: the reader stays open without clients, until close(). */
  #alwaysReading = false;
  /** Reader start/stop, one at a time: two readers on one ring would share its consumer position. */
  readonly #transitions = new Serializer();
  #records = 0;
  #undecodable = 0;
  #stale = 0;

  /** `record` takes every record, clients or not. */
  constructor(opts: { source: EventSource; context: MonitorContext; log: Logger; record?: EventRecorder }) {
    this.#source = opts.source;
    this.#context = opts.context;
    this.#log = opts.log;
    this.#record = opts.record;
  }

  stats(): MonitorHubStats {
    return { subscribers: this.#subscribers.size, reading: this.#reader !== undefined, records: this.#records, undecodable: this.#undecodable, stale: this.#stale };
  }

  /**
   * Reads the ring buffer from now on, with or without clients (until
   * close()); throws when it cannot be opened. Without it, the reader runs
   * only while a client is subscribed.
   */
  async start(): Promise<void> {
    await this.#serialize(async () => {
      this.#openReader();
      this.#alwaysReading = true;
    });
  }

  #openReader(): void {
    if (this.#reader !== undefined) return;
    this.#reader = this.#source.open(
      (records) => this.handleRecords(records),
      (err) => void this.#fail(err),
    );
    this.#log.info('monitor: reading datapath events');
  }

  /** Joins; the first client starts the reader if start() did not (and fails here if the ring buffer cannot be opened). */
  async subscribe(filter: MonitorFilter, onEvent: (e: MonitorEvent) => void, onEnd: (reason: string) => void = () => undefined): Promise<MonitorSubscription> {
    const sub: Subscriber = { filter, onEvent, onEnd, since: process.hrtime.bigint() };
    await this.#serialize(async () => {
      this.#openReader();
      this.#subscribers.add(sub);
    });
    let closed = false;
    return {
      close: async () => {
        if (closed) return;
        closed = true;
        this.#subscribers.delete(sub);
        await this.#stopIfIdle();
      },
    };
  }

  /** Records and dispatches records (the reader's callback). */
  handleRecords(records: readonly Buffer[]): void {
    let oldest: bigint | undefined;
    for (const s of this.#subscribers) if (oldest === undefined || s.since < oldest) oldest = s.since;
    const header = this.#header;
    for (const record of records) {
      this.#records++;
      if (this.#subscribers.size === 0 && this.#record === undefined) continue;
      if (!readRecordHeader(record, header)) {
        this.#undecodable++;
        continue;
      }
      // Taken once for the recorder and the clients; without a recorder only for a record a client gets (not a stale one).
      let refs: Readonly<EventRefs> | undefined;
      if (this.#record !== undefined) {
        refs = captureRefs(header, this.#context, this.#refs);
        this.#record(record, header, refs);
      }
      if (this.#subscribers.size > 0) this.#dispatch(record, header, refs, oldest!);
    }
  }

  #dispatch(record: Buffer, header: Readonly<RecordHeader>, taken: Readonly<EventRefs> | undefined, oldest: bigint): void {
    const raw = decodeRecord(record);
    if (raw === undefined) {
      this.#undecodable++;
      return;
    }
    // A recorder reads from the start, so nothing it gets sat in the ring unread.
    if (this.#record === undefined && raw.tsNs < oldest) {
      this.#stale++;
      return;
    }
    const event = buildEvent(raw, taken ?? captureRefs(header, this.#context, this.#refs));
    for (const s of this.#subscribers) {
      if (raw.tsNs < s.since || !matchesFilter(event, s.filter)) continue;
      try {
        s.onEvent(event);
      } catch (err) {
        this.#log.warn({ err }, 'monitor client failed to take an event; ending it');
        this.#subscribers.delete(s);
        s.onEnd('internal error');
      }
    }
  }

  /** Ends every client and stops reading (agent shutdown, or the reader failed). */
  async close(reason = 'the agent is stopping'): Promise<void> {
    const subs = [...this.#subscribers];
    this.#subscribers.clear();
    for (const s of subs) s.onEnd(reason);
    this.#alwaysReading = false;
    await this.#stopIfIdle();
  }

  async #fail(err: unknown): Promise<void> {
    this.#log.error({ err }, 'monitor: reading datapath events failed');
    await this.close(`reading datapath events failed: ${(err as Error).message ?? String(err)}`);
  }

  #stopIfIdle(): Promise<void> {
    return this.#serialize(async () => {
      if (this.#subscribers.size > 0 || this.#alwaysReading || this.#reader === undefined) return;
      const reader = this.#reader;
      this.#reader = undefined;
      await reader.stop();
      this.#log.info('monitor: no client left, stopped reading datapath events');
    });
  }

  #serialize(step: () => Promise<void>): Promise<void> {
    return this.#transitions.run(step);
  }
}
