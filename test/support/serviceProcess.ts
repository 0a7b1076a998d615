import { fileURLToPath } from 'node:url';
import { NetnsAgentChannel, type Unnumbered } from './netnsAgentChannel.js';
import type { ServiceAgentConfig, ServiceCommand, ServiceReply, SessionResult, ShotResult, StreamEvent } from './serviceAgent.js';

export type { Answer, SessionResult, ShotResult, StreamEvent } from './serviceAgent.js';

const SERVICE_AGENT = fileURLToPath(new URL('./serviceAgent.js', import.meta.url));

type Request = Unnumbered<ServiceCommand>;

export interface Target {
  dst: string;
  port: number;
  /** Source address to bind (a namespace with several addresses). */
  src?: string;
  /**
   * Source port to bind (a flow that reuses another's port); default: an
   * ephemeral one. Pick it below the ephemeral range (32768+), where no
   * connection of the test's own can hold it.
   */
  srcPort?: number;
}

/**
 * The service agent (serviceAgent.ts) of one network namespace: a backend
 * that answers with its name and the client address it saw, and a client
 * that opens connections and sends datagrams from there.
 */
export class ServiceAgentProcess {
  private constructor(
    readonly name: string,
    private readonly channel: NetnsAgentChannel<ServiceReply>,
  ) {}

  static async start(netnsPath: string, config: ServiceAgentConfig): Promise<ServiceAgentProcess> {
    return new ServiceAgentProcess(config.name, await NetnsAgentChannel.start<ServiceReply>(`service agent ${config.name}`, SERVICE_AGENT, netnsPath, config));
  }

  private async send(cmd: Request): Promise<ServiceReply> {
    const reply = await this.channel.send(cmd);
    if ('error' in reply) throw new Error(`service agent ${this.name}: ${reply.error}`);
    return reply;
  }

  /** `count` new TCP connections, `requests` request/answer rounds on each. */
  async tcpSessions(t: Target, opts: { count: number; requests: number; concurrency?: number; timeoutMs?: number }): Promise<SessionResult[]> {
    const r = await this.send({ op: 'tcpSessions', ...t, count: opts.count, requests: opts.requests, concurrency: opts.concurrency ?? 20, timeoutMs: opts.timeoutMs ?? 2000 });
    if (!('sessions' in r)) throw new Error(`unexpected reply ${JSON.stringify(r)}`);
    return r.sessions;
  }

  /** One TCP connection and one round (a short timeout for a flow expected to be dropped). */
  async tcpOnce(t: Target, timeoutMs = 2000): Promise<SessionResult> {
    return (await this.tcpSessions(t, { count: 1, requests: 1, concurrency: 1, timeoutMs }))[0]!;
  }

  /** `count` datagrams, each from a new socket (a new source port), each waiting for its answer. */
  async udpShots(t: Target, opts: { count: number; concurrency?: number; timeoutMs?: number }): Promise<ShotResult[]> {
    const r = await this.send({ op: 'udpShots', ...t, count: opts.count, concurrency: opts.concurrency ?? 20, timeoutMs: opts.timeoutMs ?? 2000 });
    if (!('shots' in r)) throw new Error(`unexpected reply ${JSON.stringify(r)}`);
    return r.shots;
  }

  /** A connection kept open: its handle and the first round's result. */
  async tcpOpen(t: Target, timeoutMs = 2000): Promise<{ handle: number; session: SessionResult }> {
    const r = await this.send({ op: 'tcpOpen', ...t, timeoutMs });
    if (!('handle' in r)) throw new Error(`unexpected reply ${JSON.stringify(r)}`);
    return { handle: r.handle, session: r.session };
  }

  /** One more round on a held connection: every answer so far, and whether this one came. */
  async tcpAsk(handle: number, timeoutMs = 2000): Promise<SessionResult> {
    const r = await this.send({ op: 'tcpAsk', handle, timeoutMs });
    if (!('session' in r)) throw new Error(`unexpected reply ${JSON.stringify(r)}`);
    return r.session;
  }

  async tcpClose(handle: number): Promise<void> {
    await this.send({ op: 'tcpClose', handle });
  }

  /** A connected UDP socket sending every `intervalMs`; read what answered with `udpStreamRead`. */
  async udpStream(t: Target, intervalMs: number): Promise<number> {
    const r = await this.send({ op: 'udpStream', ...t, intervalMs });
    if (!('handle' in r)) throw new Error(`unexpected reply ${JSON.stringify(r)}`);
    return r.handle;
  }

  async udpStreamRead(handle: number): Promise<StreamEvent[]> {
    const r = await this.send({ op: 'udpStreamRead', handle });
    if (!('events' in r)) throw new Error(`unexpected reply ${JSON.stringify(r)}`);
    return r.events;
  }

  async udpStreamStop(handle: number): Promise<void> {
    await this.send({ op: 'udpStreamStop', handle });
  }

  /** Why this agent ended by itself (a crash, with its stderr), or undefined while it serves. */
  get exited(): string | undefined {
    return this.channel.exited;
  }

  stop(): Promise<void> {
    return this.channel.stop();
  }

}

/** Connections per backend name (sessions that got no answer count under `''`). */
export function shareByBackend(results: ReadonlyArray<SessionResult | ShotResult>): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of results) {
    const name = 'answers' in r ? (r.answers[0]?.name ?? '') : (r.answer?.name ?? '');
    out.set(name, (out.get(name) ?? 0) + 1);
  }
  return out;
}

/** Sessions whose answers came from more than one backend (a connection that moved). */
export function movedSessions(sessions: readonly SessionResult[]): SessionResult[] {
  return sessions.filter((s) => new Set(s.answers.map((a) => a.name)).size > 1);
}

/** A short text of failed results for assertion messages. */
export function failures(results: ReadonlyArray<SessionResult | ShotResult>): string {
  const counts = new Map<string, number>();
  for (const r of results) {
    if (r.outcome === 'open') continue;
    const k = `${r.outcome}${r.detail ? ` (${r.detail})` : ''}`;
    counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  return [...counts].map(([k, n]) => `${n}× ${k}`).join(', ') || 'none';
}
