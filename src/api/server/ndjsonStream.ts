/**
 * An NDJSON answer written on the raw socket (reply.hijack): a stream has no
 * body fastify could check against the document, so the error answers before
 * it starts go through the ordinary path and only then does the stream take
 * the socket. A client this far behind (bytes queued in its socket) misses
 * lines instead of growing the agent's memory: they are counted, and the
 * owner says what was skipped.
 */
import type { FastifyReply } from 'fastify';

/** A client this far behind misses lines instead of growing the agent's memory. */
export const MAX_QUEUED_BYTES = 4 << 20;

export class NdjsonStream {
  readonly #raw: FastifyReply['raw'];
  #ended = false;
  /** Lines not written because the client was too far behind. */
  skipped = 0;

  /** Takes the socket and sends the headers at once, so the client knows the stream is in place before its first line. */
  constructor(reply: FastifyReply, onClose: () => void) {
    reply.hijack();
    this.#raw = reply.raw;
    this.#raw.on('close', () => {
      this.#ended = true;
      onClose();
    });
    this.#raw.writeHead(200, { 'content-type': 'application/x-ndjson; charset=utf-8', 'cache-control': 'no-store' });
    this.#raw.flushHeaders();
  }

  get ended(): boolean {
    return this.#ended;
  }

  /** Whether the client keeps up: a writer may hold back lines of its own (and count them) while it does not. */
  get behind(): boolean {
    return this.#raw.writableLength > MAX_QUEUED_BYTES;
  }

  /** Writes one line; false when it was skipped (the client is too far behind) or the stream has ended. */
  write(value: unknown): boolean {
    return this.writeLine(JSON.stringify(value));
  }

  /** Writes one line of JSON text as it is (a relay passes a node's lines on without encoding them again); false as write(). */
  writeLine(text: string): boolean {
    if (this.#ended) return false;
    if (this.behind) {
      this.skipped++;
      return false;
    }
    this.#raw.write(`${text}\n`);
    return true;
  }

  /** Writes several lines of JSON text in one write (a relay's batch): all of them, or none when the client is too far behind (false). */
  writeLines(texts: readonly string[]): boolean {
    if (this.#ended || texts.length === 0) return false;
    if (this.behind) {
      this.skipped += texts.length;
      return false;
    }
    this.#raw.write(`${texts.join('\n')}\n`);
    return true;
  }

  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    if (!this.#raw.writableEnded) this.#raw.end();
  }
}
