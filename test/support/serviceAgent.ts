/**
 * A service test's process inside one network namespace (`nsenter --net=<path>
 * -- node serviceAgent.js '<config>'`; serviceProcess.ts drives it), both
 * backend and client, as probeAgent is for reachability.
 *
 * As a backend it answers, on its TCP ports, every line of a connection
 * and, on its UDP ports, every datagram, with an Answer: its own name and
 * the client address and port it saw. That is what a service test checks:
 * which backend a flow reached, and what source address survived the NAT.
 *
 * As a client it runs commands read as JSON lines on stdin, answering JSON
 * lines on stdout with the same `id`:
 *   {op:'tcpSessions', dst, port, count, requests, concurrency, timeoutMs, src?}
 *       `count` new connections, `requests` request/answer rounds each
 *   {op:'udpShots', dst, port, count, concurrency, timeoutMs, src?}
 *       `count` datagrams, each from a new socket (a new source port)
 *   {op:'tcpOpen', dst, port, timeoutMs, src?} → a handle; the first answer
 *   {op:'tcpAsk', handle, timeoutMs}  one more round on a held connection
 *   {op:'tcpClose', handle}
 *   {op:'udpStream', dst, port, intervalMs, src?} → a handle: a connected
 *       socket that sends a datagram every `intervalMs` and records who answers
 *   {op:'udpStreamRead', handle}  what it recorded so far
 *   {op:'udpStreamStop', handle}
 * The first line it prints is {"ready":true} once every listener is bound.
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { connect, createServer, isIPv6, type Socket } from 'node:net';
import { createInterface } from 'node:readline';

export interface ServiceAgentConfig {
  /** What the backend answers as its name. */
  name: string;
  tcpPorts: number[];
  udpPorts: number[];
  /** The IP versions the backend listens on (default [4]), one socket each (IPv6 ones IPV6_V6ONLY). */
  versions?: Array<4 | 6>;
}

/** What a backend answers: its name, and the client's address and port as it saw them. */
export interface Answer {
  name: string;
  peer: string;
  peerPort: number;
  /** The address the client reached the backend on. */
  local: string;
  seq: number;
}

export type ClientOutcome = 'open' | 'refused' | 'unreachable' | 'timeout' | 'reset' | 'error';

export interface SessionResult {
  outcome: ClientOutcome;
  detail?: string;
  /** The client's source port (for finding the flow in conntrack when it failed). */
  localPort?: number;
  /** Every answer of the connection, in order. */
  answers: Answer[];
}

export interface ShotResult {
  outcome: ClientOutcome;
  detail?: string;
  answer?: Answer;
  /** The datagram's source port. */
  localPort?: number;
}

export interface StreamEvent {
  /** Wall clock (ms) when the answer or error arrived. */
  t: number;
  name?: string;
  peer?: string;
  error?: string;
}

type Target = { dst: string; port: number; src?: string; srcPort?: number };

export type ServiceCommand =
  | ({ id: number; op: 'tcpSessions'; count: number; requests: number; concurrency: number; timeoutMs: number } & Target)
  | ({ id: number; op: 'udpShots'; count: number; concurrency: number; timeoutMs: number } & Target)
  | ({ id: number; op: 'tcpOpen'; timeoutMs: number } & Target)
  | { id: number; op: 'tcpAsk'; handle: number; timeoutMs: number }
  | { id: number; op: 'tcpClose'; handle: number }
  | ({ id: number; op: 'udpStream'; intervalMs: number } & Target)
  | { id: number; op: 'udpStreamRead'; handle: number }
  | { id: number; op: 'udpStreamStop'; handle: number };

export type ServiceReply =
  | { id: number; sessions: SessionResult[] }
  | { id: number; shots: ShotResult[] }
  | { id: number; handle: number; session: SessionResult }
  | { id: number; session: SessionResult }
  | { id: number; events: StreamEvent[] }
  | { id: number; done: true }
  | { id: number; error: string };

let config: ServiceAgentConfig = { name: '?', tcpPorts: [], udpPorts: [] };

function outcomeOf(err: NodeJS.ErrnoException): ClientOutcome {
  if (err.code === 'ECONNREFUSED') return 'refused';
  if (err.code === 'ECONNRESET' || err.code === 'EPIPE') return 'reset';
  if (err.code === 'EHOSTUNREACH' || err.code === 'ENETUNREACH') return 'unreachable';
  return 'error';
}

// --- backend ---------------------------------------------------------------

let answerSeq = 0;
const answerFor = (peer: string | undefined, peerPort: number | undefined, local: string | undefined): Answer => ({
  name: config.name,
  peer: peer ?? '?',
  peerPort: peerPort ?? 0,
  local: local ?? '?',
  seq: ++answerSeq,
});

async function listen(): Promise<void> {
  const tcpBackend = () =>
    createServer((s) => {
      s.on('error', () => s.destroy());
      const lines = createInterface({ input: s });
      // readline re-emits its input's errors on the interface: unheard there, a client's reset
      // (ECONNRESET) would be an uncaught exception and end this whole backend, every listener
      // with it. A client that reuses the source port of a connection this backend still holds
      // (one reset elsewhere, e.g. moved to another backend when this one left the service) gets
      // a challenge ACK and answers it with a reset: routine, not a reason to stop serving.
      lines.on('error', () => s.destroy());
      lines.on('line', () => {
        if (!s.writable) return;
        s.write(`${JSON.stringify(answerFor(s.remoteAddress, s.remotePort, s.localAddress))}\n`);
      });
    });
  for (const port of config.tcpPorts) {
    for (const host of wildcards()) {
      const server = tcpBackend();
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen({ host, port, ipv6Only: host === '::' }, resolve);
      });
    }
  }
  for (const port of config.udpPorts) {
    for (const host of wildcards()) {
      const sock = udpSocketFor(host);
      sock.on('message', (_msg, rinfo) => {
        // The wildcard socket cannot tell which local address was reached: `local` is its port only.
        sock.send(JSON.stringify(answerFor(rinfo.address, rinfo.port, `*:${port}`)), rinfo.port, rinfo.address);
      });
      await new Promise<void>((resolve, reject) => {
        sock.once('error', reject);
        sock.bind({ address: host, port }, () => {
          sock.off('error', reject);
          resolve();
        });
      });
      sock.on('error', () => undefined);
    }
  }
}

/** The wildcards the backend listens on: one per configured IP version. */
const wildcards = () => (config.versions ?? [4]).map((v) => (v === 6 ? '::' : '0.0.0.0'));

/** The wildcard of an address's IP version. */
const wildcardFor = (address: string) => (isIPv6(address) ? '::' : '0.0.0.0');

/** A UDP socket of the address's IP version (IPv6 ones IPv6 only). */
function udpSocketFor(address: string): UdpSocket {
  return isIPv6(address) ? createSocket({ type: 'udp6', ipv6Only: true }) : createSocket('udp4');
}

// --- TCP client ------------------------------------------------------------

/** A client connection: line-buffered answers, one outstanding request at a time. */
class Connection {
  private buffer = '';
  private waiter: ((a: Answer | Error) => void) | undefined;
  private failed: Error | undefined;
  readonly answers: Answer[] = [];

  constructor(readonly sock: Socket) {
    sock.setNoDelay(true);
    sock.on('data', (c: Buffer) => {
      this.buffer += c.toString();
      for (;;) {
        const nl = this.buffer.indexOf('\n');
        if (nl < 0) break;
        const line = this.buffer.slice(0, nl);
        this.buffer = this.buffer.slice(nl + 1);
        const a = JSON.parse(line) as Answer;
        this.answers.push(a);
        const w = this.waiter;
        this.waiter = undefined;
        w?.(a);
      }
    });
    const fail = (err: Error) => {
      this.failed ??= err;
      const w = this.waiter;
      this.waiter = undefined;
      w?.(err);
    };
    sock.on('error', fail);
    sock.on('close', () => fail(Object.assign(new Error('connection closed by the peer'), { code: 'ECONNRESET' })));
  }

  static open(t: Target, timeoutMs: number): Promise<Connection> {
    return new Promise((resolve, reject) => {
      const sock = connect({ host: t.dst, port: t.port, ...(t.src ? { localAddress: t.src } : {}), ...(t.srcPort ? { localPort: t.srcPort } : {}) });
      const timer = setTimeout(() => {
        const localPort = sock.localPort;
        sock.destroy();
        reject(Object.assign(new Error(`connect timed out (source port ${localPort ?? '?'})`), { code: 'ETIMEDOUT', localPort }));
      }, timeoutMs);
      sock.once('connect', () => {
        clearTimeout(timer);
        resolve(new Connection(sock));
      });
      sock.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
  }

  ask(timeoutMs: number): Promise<Answer> {
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = undefined;
        reject(Object.assign(new Error('no answer in time'), { code: 'ETIMEDOUT' }));
      }, timeoutMs);
      this.waiter = (a) => {
        clearTimeout(timer);
        if (a instanceof Error) reject(a);
        else resolve(a);
      };
      this.sock.write('?\n');
    });
  }

  close(): void {
    this.sock.end();
    this.sock.destroySoon();
  }
}

function failure(err: NodeJS.ErrnoException & { localPort?: number }): { outcome: ClientOutcome; detail: string; localPort?: number } {
  return { outcome: err.code === 'ETIMEDOUT' ? 'timeout' : outcomeOf(err), detail: err.message, ...(err.localPort ? { localPort: err.localPort } : {}) };
}

async function tcpSession(t: Target, requests: number, timeoutMs: number): Promise<SessionResult> {
  let conn: Connection;
  try {
    conn = await Connection.open(t, timeoutMs);
  } catch (err) {
    return { ...failure(err as NodeJS.ErrnoException), answers: [] };
  }
  const localPort = conn.sock.localPort;
  try {
    for (let i = 0; i < requests; i++) await conn.ask(timeoutMs);
    return { outcome: 'open', answers: conn.answers, ...(localPort ? { localPort } : {}) };
  } catch (err) {
    return { ...failure(err as NodeJS.ErrnoException), answers: conn.answers };
  } finally {
    conn.close();
  }
}

async function inParallel<T>(count: number, limit: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  const out = new Array<T>(count);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= count) return;
      out[i] = await fn(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, count) }, worker));
  return out;
}

// --- UDP client ------------------------------------------------------------

function udpShot(t: Target, timeoutMs: number): Promise<ShotResult> {
  return new Promise((resolve) => {
    const sock: UdpSocket = udpSocketFor(t.dst);
    let finished = false;
    const done = (r: ShotResult) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      sock.close();
      resolve(r);
    };
    let localPort: number | undefined;
    const port = () => (localPort ? { localPort } : {});
    const timer = setTimeout(() => done({ outcome: 'timeout', ...port() }), timeoutMs);
    sock.on('error', (err: NodeJS.ErrnoException) => done({ outcome: outcomeOf(err), detail: err.message, ...port() }));
    sock.on('message', (msg) => done({ outcome: 'open', answer: JSON.parse(msg.toString()) as Answer, ...port() }));
    sock.on('listening', () => (localPort = sock.address().port));
    // Connected: an ICMP port unreachable comes back as ECONNREFUSED.
    // A connect that fails (no route: ENETUNREACH) answers its error here; sending on the unconnected socket would throw.
    sock.bind({ address: t.src ?? wildcardFor(t.dst), port: t.srcPort ?? 0 }, () =>
      sock.connect(t.port, t.dst, (err?: Error) => (err ? done({ outcome: outcomeOf(err as NodeJS.ErrnoException), detail: err.message, ...port() }) : sock.send('?'))),
    );
  });
}

interface Stream {
  sock: UdpSocket;
  timer: NodeJS.Timeout;
  events: StreamEvent[];
}

function udpStream(t: Target, intervalMs: number): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const sock = udpSocketFor(t.dst);
    const events: StreamEvent[] = [];
    sock.on('message', (msg) => {
      const a = JSON.parse(msg.toString()) as Answer;
      events.push({ t: Date.now(), name: a.name, peer: a.peer });
    });
    // A connected socket reports an ICMP error to the next call: kept as an event, the stream goes on.
    sock.on('error', (err) => events.push({ t: Date.now(), error: (err as NodeJS.ErrnoException).code ?? err.message }));
    sock.bind({ address: t.src ?? wildcardFor(t.dst), port: 0 }, () => {
      sock.connect(t.port, t.dst, (err?: Error) => {
        if (err) {
          reject(err);
          return;
        }
        const send = () => sock.send('?', (e) => e && events.push({ t: Date.now(), error: (e as NodeJS.ErrnoException).code ?? e.message }));
        send();
        resolve({ sock, events, timer: setInterval(send, intervalMs) });
      });
    });
  });
}

// --- commands --------------------------------------------------------------

const connections = new Map<number, Connection>();
const streams = new Map<number, Stream>();
let nextHandle = 1;

const targetOf = (c: Target): Target => ({ dst: c.dst, port: c.port, ...(c.src ? { src: c.src } : {}), ...(c.srcPort ? { srcPort: c.srcPort } : {}) });

async function handle(cmd: ServiceCommand): Promise<ServiceReply> {
  switch (cmd.op) {
    case 'tcpSessions':
      return { id: cmd.id, sessions: await inParallel(cmd.count, cmd.concurrency, () => tcpSession(targetOf(cmd), cmd.requests, cmd.timeoutMs)) };
    case 'udpShots':
      return { id: cmd.id, shots: await inParallel(cmd.count, cmd.concurrency, () => udpShot(targetOf(cmd), cmd.timeoutMs)) };
    case 'tcpOpen': {
      try {
        const conn = await Connection.open(targetOf(cmd), cmd.timeoutMs);
        const handle = nextHandle++;
        connections.set(handle, conn);
        try {
          await conn.ask(cmd.timeoutMs);
          return { id: cmd.id, handle, session: { outcome: 'open', answers: conn.answers } };
        } catch (err) {
          return { id: cmd.id, handle, session: { ...failure(err as NodeJS.ErrnoException), answers: conn.answers } };
        }
      } catch (err) {
        return { id: cmd.id, handle: 0, session: { ...failure(err as NodeJS.ErrnoException), answers: [] } };
      }
    }
    case 'tcpAsk': {
      const conn = connections.get(cmd.handle);
      if (!conn) return { id: cmd.id, error: `no connection ${cmd.handle}` };
      try {
        await conn.ask(cmd.timeoutMs);
        return { id: cmd.id, session: { outcome: 'open', answers: conn.answers } };
      } catch (err) {
        return { id: cmd.id, session: { ...failure(err as NodeJS.ErrnoException), answers: conn.answers } };
      }
    }
    case 'tcpClose': {
      connections.get(cmd.handle)?.close();
      connections.delete(cmd.handle);
      return { id: cmd.id, done: true };
    }
    case 'udpStream': {
      const handle = nextHandle++;
      streams.set(handle, await udpStream(targetOf(cmd), cmd.intervalMs));
      return { id: cmd.id, handle, session: { outcome: 'open', answers: [] } };
    }
    case 'udpStreamRead': {
      const s = streams.get(cmd.handle);
      return s ? { id: cmd.id, events: [...s.events] } : { id: cmd.id, error: `no stream ${cmd.handle}` };
    }
    case 'udpStreamStop': {
      const s = streams.get(cmd.handle);
      if (s) {
        clearInterval(s.timer);
        s.sock.close();
        streams.delete(cmd.handle);
      }
      return { id: cmd.id, done: true };
    }
  }
}

async function main(): Promise<void> {
  config = JSON.parse(process.argv[2] ?? '{}') as ServiceAgentConfig;
  await listen();
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
  const lines = createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    if (line.trim() === '') return;
    const cmd = JSON.parse(line) as ServiceCommand;
    void handle(cmd)
      .catch((err: Error) => ({ id: cmd.id, error: err.message }))
      .then((reply) => process.stdout.write(`${JSON.stringify(reply)}\n`));
  });
  // The driver going away (stdin closed) ends this process: nothing is left listening.
  lines.on('close', () => process.exit(0));
}

main().catch((err: Error) => {
  process.stderr.write(`service agent: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
