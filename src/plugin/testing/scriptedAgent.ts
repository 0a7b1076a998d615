import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** One HTTP request as it arrived on the socket. */
export interface ReceivedRequest {
  /** Request line and header lines, without the blank line. */
  head: string[];
  body: Buffer;
}

/** What a scripted agent does with a connection once the whole request is in. */
export type Script = (socket: Socket, request: ReceivedRequest) => void;

function parseRequest(bytes: Buffer): ReceivedRequest | undefined {
  const end = bytes.indexOf('\r\n\r\n');
  if (end < 0) return undefined;
  const head = bytes.subarray(0, end).toString('latin1').split('\r\n');
  const length = Number(/^content-length:\s*(\d+)$/im.exec(head.join('\n'))?.[1] ?? 0);
  if (bytes.length < end + 4 + length) return undefined;
  return { head, body: bytes.subarray(end + 4, end + 4 + length) };
}

/**
 * A unix-socket server standing in for the agent, answering each request
 * as its script says: slowly, wrongly, partly, hugely or not at all.
 */
export class ScriptedAgent {
  readonly requests: ReceivedRequest[] = [];
  private readonly sockets = new Set<Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();

  private readonly server: Server;

  private constructor(
    readonly dir: string,
    readonly socket: string,
    script: Script,
  ) {
    this.server = createServer((conn) => {
      this.sockets.add(conn);
      conn.on('close', () => this.sockets.delete(conn));
      conn.on('error', () => undefined); // the relay hanging up on a misbehaving agent is the point
      let bytes = Buffer.alloc(0);
      let answered = false;
      conn.on('data', (c: Buffer) => {
        bytes = Buffer.concat([bytes, c]);
        const req = answered ? undefined : parseRequest(bytes);
        if (!req) return;
        answered = true;
        this.requests.push(req);
        script(conn, req);
      });
    });
  }

  static async start(script: Script): Promise<ScriptedAgent> {
    const dir = await mkdtemp(join(tmpdir(), 'tdl-scripted-'));
    const agent = new ScriptedAgent(dir, join(dir, 'tendril.sock'), script);
    await new Promise<void>((resolve, reject) => {
      agent.server.once('error', reject);
      agent.server.listen(agent.socket, resolve);
    });
    return agent;
  }

  /** A timer the agent clears when it stops (for scripts that dribble). */
  every(ms: number, fn: () => void): void {
    this.timers.add(setInterval(fn, ms));
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers.clear();
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await rm(this.dir, { recursive: true, force: true });
  }
}

/** An HTTP/1.1 answer with a Content-Length; `headers` are added as given. */
export function httpAnswer(status: number, body: string | Buffer, headers: Record<string, string> = {}): Buffer {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body, 'utf8');
  const lines = [`HTTP/1.1 ${status} X`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), `Content-Length: ${b.length}`, 'Connection: close'];
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), b]);
}
