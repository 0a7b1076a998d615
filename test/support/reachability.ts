import { fileURLToPath } from 'node:url';
import { NetnsAgentChannel, type Unnumbered } from './netnsAgentChannel.js';
import type { ProbeAgentConfig, ProbeCommand, ProbeOutcome, ProbeReply } from './probeAgent.js';

export type { ProbeOutcome } from './probeAgent.js';

/** A command without its id (the prober numbers them). */
type ProbeRequest = Unnumbered<ProbeCommand>;

const PROBE_AGENT = fileURLToPath(new URL('./probeAgent.js', import.meta.url));

/** What a probe sends: TCP connect, one UDP datagram (echoed), or one ICMP echo request. */
export type Protocol = 'tcp' | 'udp' | 'icmp';

export interface Probe {
  proto: Protocol;
  /** Destination port (TCP, UDP). */
  port?: number;
  dst: string;
  /** Source address to bind (a namespace with several addresses). */
  src?: string;
  /** How long to wait for an answer; an expected drop costs this much. */
  timeoutMs?: number;
}

export interface ProbeResult {
  outcome: ProbeOutcome;
  detail?: string;
  ms: number;
}

/** Open or refused: either way packets went there and back. */
export function reachable(outcome: ProbeOutcome): boolean {
  return outcome === 'open' || outcome === 'refused';
}

export const DEFAULT_PROBE_TIMEOUT_MS = 400;

/**
 * The probe agent (probeAgent.ts) of one network namespace: its listeners
 * answer probes from elsewhere, and `probe` sends one from this namespace.
 */
export class NetnsProber {
  private constructor(
    readonly name: string,
    private readonly channel: NetnsAgentChannel<ProbeReply>,
  ) {}

  /** Starts the agent inside the namespace at `netnsPath` and waits until its listeners are bound. */
  static async start(name: string, netnsPath: string, config: ProbeAgentConfig): Promise<NetnsProber> {
    return new NetnsProber(name, await NetnsAgentChannel.start<ProbeReply>(`probe agent ${name}`, PROBE_AGENT, netnsPath, config));
  }

  private send(cmd: ProbeRequest): Promise<ProbeReply> {
    return this.channel.send(cmd);
  }

  async probe(p: Probe): Promise<ProbeResult> {
    const timeoutMs = p.timeoutMs ?? DEFAULT_PROBE_TIMEOUT_MS;
    const base = { dst: p.dst, timeoutMs, ...(p.src ? { src: p.src } : {}) };
    const cmd: ProbeRequest = p.proto === 'icmp' ? { op: 'icmp', ...base } : { op: p.proto, port: portOf(p), ...base };
    const r = await this.send(cmd);
    if (!('outcome' in r)) throw new Error(`probe agent ${this.name}: unexpected reply ${JSON.stringify(r)}`);
    return { outcome: r.outcome, ms: r.ms, ...(r.detail ? { detail: r.detail } : {}) };
  }

  /** How many datagrams this namespace's UDP server on `port` received from `from`. */
  async udpReceived(port: number, from: string): Promise<number> {
    const r = await this.send({ op: 'udpReceived', port, from });
    if (!('count' in r)) throw new Error(`probe agent ${this.name}: unexpected reply ${JSON.stringify(r)}`);
    return r.count;
  }

  /** Ends the agent (closing its stdin ends it; SIGKILL if it lingers). */
  stop(): Promise<void> {
    return this.channel.stop();
  }

}

function portOf(p: Probe): number {
  if (p.port === undefined) throw new Error(`a ${p.proto} probe needs a port`);
  return p.port;
}

/** Maps `items` through `fn` with at most `limit` calls in flight, keeping the order. */
export async function inParallel<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= items.length) return;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/** A probe as a short text for assertion messages: `udp/53`, `icmp`. */
export function describeProbe(p: { proto: Protocol; port?: number }): string {
  return p.proto === 'icmp' ? 'icmp' : `${p.proto}/${p.port}`;
}
