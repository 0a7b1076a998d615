import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A real single-member etcd for tests: free loopback ports, a temporary data
 * dir, stopped and removed on teardown. A missing binary is an error, never a
 * skip: the etcd tests are part of the proof and must not pass by not running.
 */
export const ETCD_BIN = process.env.ETCD_BIN ?? '/usr/bin/etcd';

export interface EtcdHarness {
  /** Client URL, e.g. http://127.0.0.1:40123. */
  readonly endpoint: string;
  readonly dataDir: string;
  /** Stops etcd (SIGTERM, then SIGKILL) and keeps the data dir. */
  stop(): Promise<void>;
  /** Starts etcd again on the same port and data dir. */
  start(): Promise<void>;
  /** Stops etcd and removes the data dir; safe to call more than once. */
  destroy(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      if (addr === null || typeof addr === 'string') {
        srv.close();
        reject(new Error('could not get a free port'));
        return;
      }
      srv.close(() => resolve(addr.port));
    });
  });
}

// Every etcd a test started, killed synchronously if the test process exits
// without reaching its teardown (a crash, an uncaught error).
const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export async function startEtcd(): Promise<EtcdHarness> {
  if (!existsSync(ETCD_BIN)) {
    throw new Error(`etcd binary not found at ${ETCD_BIN}: install etcd-server (apt-get install etcd-server) or set ETCD_BIN`);
  }
  const clientPort = await freePort();
  const peerPort = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'tendril-etcd-'));
  const endpoint = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const argv = [
    '--name', 'tendril-test',
    '--data-dir', dataDir,
    '--listen-client-urls', endpoint,
    '--advertise-client-urls', endpoint,
    '--listen-peer-urls', peer,
    '--initial-advertise-peer-urls', peer,
    '--initial-cluster', `tendril-test=${peer}`,
    '--initial-cluster-state', 'new',
    '--logger', 'zap',
    '--log-level', 'error',
  ];
  let child: ChildProcess | undefined;
  let stderr = '';

  async function waitHealthy(proc: ChildProcess): Promise<void> {
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null || proc.signalCode !== null) {
        throw new Error(`etcd exited during start-up (${proc.exitCode ?? proc.signalCode}): ${stderr.slice(-2000)}`);
      }
      try {
        const res = await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1000) });
        const body = (await res.json()) as { health?: string };
        if (body.health === 'true') return;
      } catch {
        // Not listening yet: connection refused is the expected answer while etcd boots.
      }
      await sleep(50);
    }
    throw new Error(`etcd at ${endpoint} did not become healthy in 15 s: ${stderr.slice(-2000)}`);
  }

  async function start(): Promise<void> {
    if (child !== undefined) throw new Error('etcd already running');
    stderr = '';
    const proc = spawn(ETCD_BIN, argv, { stdio: ['ignore', 'ignore', 'pipe'] });
    proc.stderr?.setEncoding('utf8');
    proc.stderr?.on('data', (d: string) => {
      stderr = (stderr + d).slice(-8000);
    });
    live.add(proc);
    child = proc;
    try {
      await waitHealthy(proc);
    } catch (err) {
      await stop();
      throw err;
    }
  }

  async function stop(): Promise<void> {
    const proc = child;
    if (proc === undefined) return;
    child = undefined;
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      proc.kill('SIGTERM');
      const killed = await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]);
      if (!killed) {
        proc.kill('SIGKILL');
        await exited;
      }
    }
    live.delete(proc);
  }

  async function destroy(): Promise<void> {
    await stop();
    rmSync(dataDir, { recursive: true, force: true });
  }

  try {
    await start();
  } catch (err) {
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  return { endpoint, dataDir, start, stop, destroy };
}
