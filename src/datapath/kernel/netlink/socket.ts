import { Serializer } from '../../../async/keyedSerializer.js';
import { validateAbsolutePath } from '../../../cni/names.js';
import { KernelError, errnoNumber, toKernelError } from '../errors.js';
import { loadAddon } from '../native.js';
import { type MessageBuilder, type NetlinkMessage, NetlinkFormatError, decodeAck, decodeDone, parseMessages } from './codec.js';
import { NETLINK_ROUTE, NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP } from './constants.js';

/** An open socket as the addon hands it out (a type-tagged napi external; the addon refuses any other). */
interface NativeHandle {
  readonly __brand: 'tendril netlink socket';
}

interface NetlinkAddon {
  netlinkOpen(netns: string | null, protocol: number, timeoutMs: number): Promise<NativeHandle>;
  netlinkRequest(handle: NativeHandle, bytes: Uint8Array, firstSeq: number, lastSeq: number): Promise<Buffer>;
  netlinkClose(handle: NativeHandle): void;
}

function addon(): NetlinkAddon {
  return loadAddon() as NetlinkAddon;
}

export interface NetlinkSocketOptions {
  /** Path of a network namespace file (/var/run/netns/x, /proc/<pid>/ns/net); absent: the agent's own. */
  netns?: string;
  /** Netlink protocol; NETLINK_ROUTE unless given. */
  protocol?: number;
  /** How long one reply may take before the request fails with ETIMEDOUT. */
  timeoutMs?: number;
}

/** One message of a batch and the name it carries in errors. */
export interface BatchItem {
  message: MessageBuilder;
  operation: string;
}

const DEFAULT_TIMEOUT_MS = 5000;
/** The addon's bounds: netlink protocol numbers, and a timeout that fits SO_RCVTIMEO's use here. */
const MAX_PROTOCOL = 31;
const MAX_TIMEOUT_MS = 600_000;
const DUMP_ATTEMPTS = 4;
export const MAX_BATCH = 256;

/**
 * A netlink socket opened in one network namespace. Requests on it run one
 * at a time, in call order (the kernel answers a socket's requests in order
 * and the addon allows one exchange per socket); each gets its own sequence
 * numbers, and a failure becomes a KernelError with the errno, the
 * operation and the kernel's extended-ack text.
 */
export class NetlinkSocket {
  private seq: number;
  private readonly serial = new Serializer();
  private closed = false;

  private constructor(
    private readonly handle: NativeHandle,
    readonly netns: string | undefined,
  ) {
    // Distinct starting points make a late reply to another socket's request easy to spot in a trace.
    this.seq = (Math.floor(Math.random() * 0x7fff) << 16) >>> 0;
  }

  static async open(opts: NetlinkSocketOptions = {}): Promise<NetlinkSocket> {
    if (opts.netns !== undefined) validateAbsolutePath(opts.netns, 'netns path');
    const protocol = opts.protocol ?? NETLINK_ROUTE;
    const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (!Number.isInteger(protocol) || protocol < 0 || protocol > MAX_PROTOCOL) throw new RangeError(`netlink protocol must be an integer from 0 to ${MAX_PROTOCOL}, got ${protocol}`);
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TIMEOUT_MS) {
      throw new RangeError(`netlink timeoutMs must be an integer from 1 to ${MAX_TIMEOUT_MS}, got ${timeoutMs}`);
    }
    const where = opts.netns === undefined ? 'own netns' : opts.netns;
    let handle: NativeHandle;
    try {
      handle = await addon().netlinkOpen(opts.netns ?? null, protocol, timeoutMs);
    } catch (err) {
      throw toKernelError(err, `netlink socket in ${where}`);
    }
    return new NetlinkSocket(handle, opts.netns);
  }

  private nextSeq(count: number): number {
    // Sequence numbers stay below 2^32 - MAX_BATCH so a batch never wraps.
    if (this.seq + count >= 0xffffffff - MAX_BATCH) this.seq = 0;
    const first = this.seq + 1;
    this.seq += count;
    return first;
  }

  private describe(operation: string): string {
    return this.netns === undefined ? operation : `${operation} (netns ${this.netns})`;
  }

  /** Runs `fn` after every earlier request of this socket has finished. */
  private serialized<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new KernelError(errnoNumber('EBADF'), 'netlink socket is closed'));
    return this.serial.run(fn);
  }

  private async exchange(bytes: Uint8Array, first: number, last: number, operation: string): Promise<NetlinkMessage[]> {
    let reply: Buffer;
    try {
      reply = await addon().netlinkRequest(this.handle, bytes, first, last);
    } catch (err) {
      throw toKernelError(err, this.describe(operation));
    }
    try {
      return parseMessages(reply);
    } catch (err) {
      if (err instanceof NetlinkFormatError) throw new KernelError(errnoNumber('EBADMSG'), this.describe(operation), err.message, { cause: err });
      throw err;
    }
  }

  /**
   * Sends one request with NLM_F_ACK and resolves with the messages the
   * kernel sent before its acknowledgement (a GET's answer; nothing for a
   * NEW/DEL), or rejects with the ack's error.
   */
  request(message: MessageBuilder, operation: string): Promise<NetlinkMessage[]> {
    return this.serialized(async () => {
      const seq = this.nextSeq(1);
      const replies = await this.exchange(message.encode(seq, NLM_F_REQUEST | NLM_F_ACK), seq, seq, operation);
      return this.settle(replies, operation);
    });
  }

  private settle(replies: NetlinkMessage[], operation: string): NetlinkMessage[] {
    const data: NetlinkMessage[] = [];
    for (const m of replies) {
      if (m.type === NLMSG_ERROR) {
        const ack = decodeAck(m);
        if (ack.errno !== 0) throw new KernelError(ack.errno, this.describe(operation), ack.message);
        return data;
      }
      if (m.type !== NLMSG_NOOP) data.push(m);
    }
    throw new KernelError(errnoNumber('EPROTO'), this.describe(operation), 'reply ended without an acknowledgement');
  }

  /**
   * Sends several requests in one datagram and waits for all their
   * acknowledgements: one round trip instead of one per message. The
   * kernel runs every message even when an earlier one failed, so this is
   * for steps that are independent or whose failure makes the whole batch
   * moot; each item's outcome is returned in order (its reply messages, or
   * its KernelError).
   */
  batch(items: readonly BatchItem[]): Promise<Array<NetlinkMessage[] | KernelError>> {
    if (items.length === 0) return Promise.resolve([]);
    if (items.length > MAX_BATCH) return Promise.reject(new RangeError(`a netlink batch holds at most ${MAX_BATCH} messages`));
    return this.serialized(async () => {
      const first = this.nextSeq(items.length);
      const encoded = items.map((item, i) => item.message.encode(first + i, NLM_F_REQUEST | NLM_F_ACK));
      const bytes = new Uint8Array(encoded.reduce((n, e) => n + e.length, 0));
      let off = 0;
      for (const e of encoded) {
        bytes.set(e, off);
        off += e.length;
      }
      const last = first + items.length - 1;
      const replies = await this.exchange(bytes, first, last, items.map((i) => i.operation).join('; '));
      return items.map((item, i) => {
        try {
          return this.settle(
            replies.filter((m) => m.seq === first + i),
            item.operation,
          );
        } catch (err) {
          if (err instanceof KernelError) return err;
          throw err;
        }
      });
    });
  }

  /**
   * Sends a dump request and resolves with every message of the dump. A
   * dump the kernel marks interrupted (the table changed while it was
   * read) is retried a few times, then fails with EAGAIN.
   */
  dump(message: MessageBuilder, operation: string): Promise<NetlinkMessage[]> {
    return this.serialized(async () => {
      for (let attempt = 0; attempt < DUMP_ATTEMPTS; attempt++) {
        const seq = this.nextSeq(1);
        const replies = await this.exchange(message.encode(seq, NLM_F_REQUEST | NLM_F_DUMP), seq, seq, operation);
        const data: NetlinkMessage[] = [];
        let interrupted = false;
        for (const m of replies) {
          if ((m.flags & NLM_F_DUMP_INTR) !== 0) interrupted = true;
          if (m.type === NLMSG_DONE || m.type === NLMSG_ERROR) {
            const ack = m.type === NLMSG_DONE ? decodeDone(m) : decodeAck(m);
            if (ack.errno !== 0) throw new KernelError(ack.errno, this.describe(operation), ack.message);
          } else if (m.type !== NLMSG_NOOP) {
            data.push(m);
          }
        }
        if (!interrupted) return data;
      }
      throw new KernelError(errnoNumber('EAGAIN'), this.describe(operation), 'dump kept being interrupted by concurrent changes');
    });
  }

  /** Closes the socket once the requests already queued on it have finished. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.serial.settled();
    addon().netlinkClose(this.handle);
  }
}
