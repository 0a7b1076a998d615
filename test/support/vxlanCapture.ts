/**
 * VXLAN packets captured with tcpdump (Debian's) on a node's underlay device,
 * parsed from tcpdump's text: each packet prints its outer header with the
 * VNI, then the inner packet on the next line. `-T vxlan` makes tcpdump
 * decode the port as VXLAN (8472 is also OTV's port, which it would pick).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { toolEnv } from './run.js';

export interface VxlanPacket {
  outerSrc: string;
  outerDst: string;
  dstPort: number;
  vni: number;
  /** The inner packet's line as tcpdump printed it (`IP a > b: ICMP echo request, …`). */
  inner: string;
}

/** The outer header's line, over an IPv4 (`IP a.b.c.d.port`) or an IPv6 (`IP6 fd00::1.port`) underlay. */
const OUTER = /^\S+ IP6? ([\d.]+|[\da-f:]+)\.\d+ > ([\d.]+|[\da-f:]+)\.(\d+): VXLAN, flags \[I\] \(0x08\), vni (\d+)\s*$/;

/** Parses tcpdump's `-T vxlan` text into packets (lines that are no VXLAN outer header end up as `inner`). */
export function parseVxlanText(text: string): VxlanPacket[] {
  const out: VxlanPacket[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const m = OUTER.exec(lines[i]!);
    if (!m) continue;
    out.push({ outerSrc: m[1]!, outerDst: m[2]!, dstPort: Number(m[3]), vni: Number(m[4]), inner: (lines[i + 1] ?? '').trim() });
  }
  return out;
}

/** A running capture; `done` waits for `count` packets (or the timeout) and parses them. */
export class VxlanCapture {
  private stdout = '';
  private stderr = '';
  private readonly exited: Promise<void>;

  private constructor(
    private readonly child: ChildProcess,
    readonly filter: string,
  ) {
    child.stdout!.on('data', (c: Buffer) => (this.stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (this.stderr += c.toString()));
    this.exited = new Promise((r) => child.once('exit', () => r()));
  }

  /** Starts tcpdump in a namespace on `device` with a pcap filter, and waits until it listens. */
  static async start(netnsPath: string, device: string, filter: string, count: number): Promise<VxlanCapture> {
    const argv = [`--net=${netnsPath}`, '--', 'tcpdump', '-T', 'vxlan', '-n', '-l', '-i', device, '-c', String(count), filter];
    const cap = new VxlanCapture(spawn('nsenter', argv, { env: toolEnv(), stdio: ['ignore', 'pipe', 'pipe'] }), filter);
    const deadline = Date.now() + 5000;
    while (!cap.stderr.includes('listening on')) {
      if (cap.child.exitCode !== null || cap.child.signalCode !== null) throw new Error(`tcpdump exited: ${cap.stderr}`);
      if (Date.now() > deadline) {
        await cap.stop();
        throw new Error(`tcpdump did not start listening in 5 s: ${cap.stderr}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    return cap;
  }

  /** Waits until tcpdump has its packets (or `timeoutMs`), then the packets seen. */
  async done(timeoutMs: number): Promise<{ packets: VxlanPacket[]; text: string }> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.exited, new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
    await this.stop();
    return { packets: parseVxlanText(this.stdout), text: `${this.stdout}\n${this.stderr}`.trim() };
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 2000);
    await this.exited;
    clearTimeout(timer);
  }
}
