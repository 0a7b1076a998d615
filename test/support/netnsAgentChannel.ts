import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

/** A command of a namespace agent's protocol without its id (the channel numbers them). */
export type Unnumbered<C> = C extends unknown ? Omit<C, 'id'> : never;

/**
 * A helper script run inside one network namespace (probeAgent.ts,
 * serviceAgent.ts), spoken to in NDJSON over its stdin and stdout: it
 * prints `{"ready": true}` once it is listening, then one reply per command,
 * matched by the id the channel gives each command.
 */
export class NetnsAgentChannel<Reply extends { id: number }> {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  private stderr = '';
  private stopping = false;
  /** How the agent ended when nobody stopped it (its stderr holds why). */
  private death: string | undefined;

  private constructor(
    /** What the agent is, for messages (`probe agent web`). */
    readonly label: string,
    private readonly child: ChildProcess,
  ) {}

  /** Starts `script` (a compiled .js) inside the namespace at `netnsPath` with its config, and waits until it is ready. */
  static async start<Reply extends { id: number }>(label: string, script: string, netnsPath: string, config: unknown): Promise<NetnsAgentChannel<Reply>> {
    const child = spawn('nsenter', [`--net=${netnsPath}`, '--', process.execPath, script, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] });
    const ch = new NetnsAgentChannel<Reply>(label, child);
    child.stderr!.on('data', (c: Buffer) => (ch.stderr += c.toString()));
    const lines = createInterface({ input: child.stdout! });
    // An agent that ends by itself (a crash) fails what waits on it, and says so on stderr: a
    // backend that is gone shows only as refused connections otherwise.
    child.once('exit', (code, signal) => {
      if (ch.stopping) return;
      ch.death = `${label} exited by itself (code ${code}, signal ${signal}): ${ch.stderr}`;
      process.stderr.write(`${ch.death}\n`);
      for (const p of ch.pending.values()) p.reject(new Error(ch.death));
      ch.pending.clear();
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${label} not ready in 10 s: ${ch.stderr}`)), 10_000);
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`${label} exited ${code}: ${ch.stderr}`));
      });
      lines.on('line', (line) => {
        const msg = JSON.parse(line) as Reply | { ready: true };
        if ('ready' in msg) {
          clearTimeout(timer);
          resolve();
          return;
        }
        const waiter = ch.pending.get(msg.id);
        ch.pending.delete(msg.id);
        waiter?.resolve(msg);
      });
    });
    return ch;
  }

  /** Sends one command and waits for its reply. */
  send(cmd: object): Promise<Reply> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.child.exitCode !== null || this.child.signalCode !== null) {
        reject(new Error(`${this.label} is gone: ${this.stderr}`));
        return;
      }
      this.pending.set(id, { resolve, reject });
      this.child.stdin!.write(`${JSON.stringify({ ...cmd, id })}\n`);
    });
  }

  /** Why the agent ended by itself, or undefined while it runs (or was stopped). */
  get exited(): string | undefined {
    return this.death;
  }

  /** Ends the agent (closing its stdin ends it; SIGKILL if it lingers). */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.stdin!.end();
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 2000);
    await exited;
    clearTimeout(timer);
  }
}
