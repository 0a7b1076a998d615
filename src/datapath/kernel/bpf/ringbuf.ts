import { MapType } from './constants.js';
import { type BpfMap, RawMap } from './map.js';
import { type NativeRingReader, bpfSync, nativeBpf, toBpfError } from './native.js';

export interface RingBufferOptions {
  /**
   * Longest record delivered, in bytes (4096 unless given, at most 1 MiB);
   * longer ones are dropped and counted in stats().oversized.
   */
  maxRecordSize?: number;
  /**
   * After each drain, wait this long (ms, at most 1000; 0 unless given)
   * before waiting on the ring again, so records arriving meanwhile come in
   * one batch: one thread wakeup and one call for many records, at the cost
   * of that much delay. For a reader that takes every record (the agent's
   * monitor), not one waiting on a single record.
   */
  coalesceMs?: number;
  /** Whether a running reader keeps Node's event loop alive (true unless given). */
  keepAlive?: boolean;
  /**
   * Called when the reader's thread stops on a failure (a KernelError), or
   * when onRecords throws. Without it such errors are thrown as uncaught
   * exceptions: a monitor that silently stops is worse than a crash.
   */
  onError?: (err: unknown) => void;
}

export interface RingBufferStats {
  /** Records delivered to onRecords (or queued for it). */
  records: number;
  /** Calls of onRecords (or queued). */
  batches: number;
  /** Records dropped for being longer than maxRecordSize. */
  oversized: number;
}

/**
 * Consumes a BPF_MAP_TYPE_RINGBUF map on a native thread of its own (epoll
 * on the ring, copying each record), so the event loop only ever runs the
 * callback: onRecords gets the records in arrival order, in batches of up to
 * 256. When JavaScript falls behind, the native queue fills, the thread
 * waits, and records stay in the kernel's ring (which drops new ones when full).
 * A reader runs until stop(), whether the caller keeps a reference or not.
 */
export class RingBufferReader {
  readonly #reader: NativeRingReader;
  #stopped: Promise<void> | undefined;

  private constructor(reader: NativeRingReader) {
    this.#reader = reader;
  }

  static open(map: RawMap | BpfMap<unknown, unknown>, onRecords: (records: Buffer[]) => void, opts: RingBufferOptions = {}): RingBufferReader {
    const raw = map instanceof RawMap ? map : map.raw;
    if (raw.info.type !== MapType.RINGBUF) throw new TypeError(`map ${raw.name} is not a ring buffer`);
    const fail = (err: unknown): void => {
      if (opts.onError) opts.onError(err);
      else throw err;
    };
    // The native thread holds `deliver`, and `deliver` holds the reader: a
    // running reader is never collected, referenced by the caller or not.
    const owner: { reader?: RingBufferReader } = {};
    const deliver = (records: Buffer[] | null, error?: Error): void => {
      if (owner.reader === undefined) return; // cannot happen: set before the event loop runs again
      if (records === null) {
        fail(toBpfError(error));
        return;
      }
      try {
        onRecords(records);
      } catch (err) {
        fail(err);
      }
    };
    const reader = new RingBufferReader(
      bpfSync(() =>
        nativeBpf().ringbufOpen(raw.handle(), deliver, {
          ...(opts.maxRecordSize !== undefined ? { maxRecordSize: opts.maxRecordSize } : {}),
          ...(opts.coalesceMs !== undefined ? { coalesceMs: opts.coalesceMs } : {}),
        }),
      ),
    );
    owner.reader = reader;
    if (opts.keepAlive === false) reader.unref();
    return reader;
  }

  stats(): RingBufferStats {
    return nativeBpf().ringbufStats(this.#reader);
  }

  /** Keeps the event loop alive while the reader runs. */
  ref(): void {
    nativeBpf().ringbufRef(this.#reader, true);
  }

  /** Lets the process exit while the reader runs. */
  unref(): void {
    nativeBpf().ringbufRef(this.#reader, false);
  }

  /**
   * Stops the thread. Resolves once it has exited and every batch it had
   * queued was delivered; calling it again returns the same promise.
   */
  stop(): Promise<void> {
    this.#stopped ??= nativeBpf().ringbufStop(this.#reader);
    return this.#stopped;
  }
}
