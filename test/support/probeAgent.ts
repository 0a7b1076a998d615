/**
 * A reachability probe that runs as its own process inside one network
 * namespace (`nsenter --net=<path> -- node probeAgent.js '<config>'`; see
 * reachability.ts, which drives it). Node cannot move a socket between
 * namespaces, so each namespace gets one long-lived process instead of one
 * process per probe: hundreds of probes then cost sockets, not spawns.
 *
 * It listens on the configured TCP ports (accepts, nothing more) and UDP
 * ports (echoes every datagram, counting them per source address) on the
 * configured IP versions, and runs
 * client probes it reads as JSON lines on stdin, answering JSON lines on
 * stdout with the same `id`:
 *   {op:'tcp', dst, port, src?, timeoutMs}   → open | refused | unreachable | timeout
 *   {op:'udp', dst, port, src?, timeoutMs}   → one datagram; open when its echo returns
 *   {op:'icmp', dst, src?, timeoutMs}        → one echo request (iputils ping; ICMPv6 to an IPv6 dst)
 *   {op:'udpReceived', port, from}           → datagrams the UDP server got from `from`
 * The first line it prints is {"ready":true} once every listener is bound.
 */
import { spawn } from 'node:child_process';
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { connect, createServer, type Server } from 'node:net';
import { isIPv6 } from 'node:net';
import { createInterface } from 'node:readline';

export type ProbeOutcome = 'open' | 'refused' | 'unreachable' | 'timeout' | 'error';

export interface ProbeAgentConfig {
  tcpPorts: number[];
  udpPorts: number[];
  /**
   * Addresses the UDP servers bind to (default: 0.0.0.0). A namespace with
   * several addresses needs one socket per address: a reply from a wildcard
   * socket leaves from the route's preferred source, which the client's
   * connected socket (and conntrack) would not take for the answer.
   */
  udpBind?: string[];
  /**
   * The IP versions the listeners take (default [4]: IPv4 only, as before).
   * Each version gets its own socket (IPv6 ones IPV6_V6ONLY): a dual-stack
   * socket would see IPv4 peers as ::ffff:a.b.c.d and count them apart.
   */
  versions?: Array<4 | 6>;
}

export type ProbeCommand =
  | { id: number; op: 'tcp' | 'udp'; dst: string; port: number; src?: string; timeoutMs: number }
  | { id: number; op: 'icmp'; dst: string; src?: string; timeoutMs: number }
  | { id: number; op: 'udpReceived'; port: number; from: string };

export type ProbeReply = { id: number; outcome: ProbeOutcome; detail?: string; ms: number } | { id: number; count: number };

const received = new Map<string, number>();
const receivedKey = (port: number, from: string) => `${port} ${from}`;

function outcomeOfError(err: NodeJS.ErrnoException): ProbeOutcome {
  if (err.code === 'ECONNREFUSED') return 'refused';
  if (err.code === 'EHOSTUNREACH' || err.code === 'ENETUNREACH') return 'unreachable';
  return 'error';
}

function probeTcp(dst: string, port: number, src: string | undefined, timeoutMs: number): Promise<{ outcome: ProbeOutcome; detail?: string }> {
  return new Promise((resolve) => {
    const sock = connect({ host: dst, port, ...(src ? { localAddress: src } : {}) });
    const done = (outcome: ProbeOutcome, detail?: string) => {
      clearTimeout(timer);
      sock.destroy();
      resolve({ outcome, ...(detail ? { detail } : {}) });
    };
    const timer = setTimeout(() => done('timeout'), timeoutMs);
    sock.once('connect', () => done('open'));
    sock.once('error', (err: NodeJS.ErrnoException) => done(outcomeOfError(err), err.message));
  });
}

let udpSeq = 0;
function probeUdp(dst: string, port: number, src: string | undefined, timeoutMs: number): Promise<{ outcome: ProbeOutcome; detail?: string }> {
  return new Promise((resolve) => {
    const sock: UdpSocket = udpSocketFor(dst);
    const token = `tdlprobe-${process.pid}-${++udpSeq}`;
    let finished = false;
    const done = (outcome: ProbeOutcome, detail?: string) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      sock.close();
      resolve({ outcome, ...(detail ? { detail } : {}) });
    };
    let resend: NodeJS.Timeout | undefined;
    const timer = setTimeout(() => done('timeout'), timeoutMs);
    sock.on('close', () => clearInterval(resend));
    sock.on('error', (err: NodeJS.ErrnoException) => done(outcomeOfError(err), err.message));
    sock.on('message', (msg) => {
      if (msg.toString() === token) done('open');
    });
    // Connected, so an ICMP port-unreachable comes back as ECONNREFUSED (the packet got there). Sent again every
    // 100 ms until answered, as TCP retransmits its SYN: one datagram lost on a loaded machine (a full socket buffer
    // of a probe agent busy elsewhere) is not a path that drops; one that drops drops them all.
    sock.bind({ address: src ?? wildcardFor(dst), port: 0 }, () => {
      sock.connect(port, dst, () => {
        if (finished) return;
        sock.send(token);
        resend = setInterval(() => {
          if (!finished) sock.send(token);
        }, 100);
      });
    });
  });
}

function probeIcmp(dst: string, src: string | undefined, timeoutMs: number): Promise<{ outcome: ProbeOutcome; detail?: string }> {
  return new Promise((resolve) => {
    const seconds = (Math.max(timeoutMs, 100) / 1000).toFixed(1);
    // The family spelled out: an ICMPv6 echo for an IPv6 destination, never a guess from the name.
    const argv = [isIPv6(dst) ? '-6' : '-4', '-n', '-q', '-c', '1', '-W', seconds, ...(src ? ['-I', src] : []), dst];
    const child = spawn('ping', argv, { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.on('error', (e) => resolve({ outcome: 'error', detail: e.message }));
    // ping: 0 = a reply, 1 = no reply, anything else = it could not send.
    child.on('close', (code) => resolve(code === 0 ? { outcome: 'open' } : code === 1 ? { outcome: 'timeout' } : { outcome: 'error', detail: err.trim() || `ping exited ${code}` }));
  });
}

/** The wildcard of an address's IP version: what a socket binds when it has no source address. */
function wildcardFor(address: string): string {
  return isIPv6(address) ? '::' : '0.0.0.0';
}

/** A UDP socket of the address's IP version; IPv6 ones take IPv6 only (see ProbeAgentConfig.versions). */
function udpSocketFor(address: string): UdpSocket {
  return isIPv6(address) ? createSocket({ type: 'udp6', ipv6Only: true }) : createSocket('udp4');
}

async function listen(config: ProbeAgentConfig): Promise<Array<Server | UdpSocket>> {
  const handles: Array<Server | UdpSocket> = [];
  const wildcards = (config.versions ?? [4]).map((v) => (v === 6 ? '::' : '0.0.0.0'));
  for (const port of config.tcpPorts) {
    for (const host of wildcards) {
      const server = createServer((s) => {
        s.on('error', () => s.destroy());
        s.resume();
      });
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen({ host, port, ipv6Only: host === '::' }, resolve);
      });
      handles.push(server);
    }
  }
  for (const port of config.udpPorts) {
    for (const address of config.udpBind ?? wildcards) handles.push(await udpServer(address, port));
  }
  return handles;
}

async function udpServer(address: string, port: number): Promise<UdpSocket> {
  const sock = udpSocketFor(address);
  sock.on('message', (msg, rinfo) => {
    const k = receivedKey(port, rinfo.address);
    received.set(k, (received.get(k) ?? 0) + 1);
    sock.send(msg, rinfo.port, rinfo.address);
  });
  await new Promise<void>((resolve, reject) => {
    sock.once('error', reject);
    sock.bind({ address, port }, () => {
      sock.off('error', reject);
      resolve();
    });
  });
  sock.on('error', () => undefined);
  return sock;
}

async function handle(cmd: ProbeCommand): Promise<ProbeReply> {
  if (cmd.op === 'udpReceived') return { id: cmd.id, count: received.get(receivedKey(cmd.port, cmd.from)) ?? 0 };
  const started = Date.now();
  const r =
    cmd.op === 'tcp'
      ? await probeTcp(cmd.dst, cmd.port, cmd.src, cmd.timeoutMs)
      : cmd.op === 'udp'
        ? await probeUdp(cmd.dst, cmd.port, cmd.src, cmd.timeoutMs)
        : await probeIcmp(cmd.dst, cmd.src, cmd.timeoutMs);
  return { id: cmd.id, ...r, ms: Date.now() - started };
}

async function main(): Promise<void> {
  const config = JSON.parse(process.argv[2] ?? '{}') as ProbeAgentConfig;
  await listen({ tcpPorts: config.tcpPorts ?? [], udpPorts: config.udpPorts ?? [], ...(config.udpBind ? { udpBind: config.udpBind } : {}), ...(config.versions ? { versions: config.versions } : {}) });
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
  const lines = createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    if (line.trim() === '') return;
    const cmd = JSON.parse(line) as ProbeCommand;
    void handle(cmd).then((reply) => process.stdout.write(`${JSON.stringify(reply)}\n`));
  });
  // The driver going away (stdin closed) ends the probe agent: no orphan is left listening.
  lines.on('close', () => process.exit(0));
}

main().catch((err: Error) => {
  process.stderr.write(`probe agent: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
