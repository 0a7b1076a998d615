import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
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

/** Files of a throwaway PKI: a CA, a server cert for 127.0.0.1 and a client cert. */
export interface TestPki {
  dir: string;
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

function openssl(args: string[], cwd: string): void {
  const r = spawnSync('openssl', args, { cwd, encoding: 'utf8' });
  if (r.error) throw new Error(`openssl not runnable: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')} failed: ${r.stderr}`);
}

/** Creates a CA plus server and client certificates (P-256, valid one day) in a temp dir. */
export function makeTestPki(): TestPki {
  const dir = mkdtempSync(join(tmpdir(), 'tendril-pki-'));
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...key, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=tendril-test-ca'], dir);
  writeFileSync(join(dir, 'server.ext'), 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n');
  writeFileSync(join(dir, 'client.ext'), 'extendedKeyUsage=clientAuth\n');
  for (const [name, cn] of [['server', '127.0.0.1'], ['client', 'tendril-client']] as const) {
    openssl(['req', ...key, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`], dir);
    openssl(
      ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.pem`, '-days', '1', '-extfile', `${name}.ext`],
      dir,
    );
  }
  return {
    dir,
    ca: join(dir, 'ca.pem'),
    serverCert: join(dir, 'server.pem'),
    serverKey: join(dir, 'server.key'),
    clientCert: join(dir, 'client.pem'),
    clientKey: join(dir, 'client.key'),
  };
}

export interface EtcdStartOptions {
  /** Serve clients over TLS and require a client certificate signed by the CA. */
  tls?: TestPki;
}

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

/** GET /health over TLS with the client certificate (fetch cannot take a private CA). */
function tlsHealth(url: string, pki: TestPki): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { ca: readFileSync(pki.ca), cert: readFileSync(pki.clientCert), key: readFileSync(pki.clientKey), timeout: 1000 },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve(body));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

export async function startEtcd(options: EtcdStartOptions = {}): Promise<EtcdHarness> {
  if (!existsSync(ETCD_BIN)) {
    throw new Error(`etcd binary not found at ${ETCD_BIN}: install etcd-server (apt-get install etcd-server) or set ETCD_BIN`);
  }
  const clientPort = await freePort();
  const peerPort = await freePort();
  const dataDir = mkdtempSync(join(tmpdir(), 'tendril-etcd-'));
  const tls = options.tls;
  const endpoint = `${tls ? 'https' : 'http'}://127.0.0.1:${clientPort}`;
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
    ...(tls
      ? ['--cert-file', tls.serverCert, '--key-file', tls.serverKey, '--trusted-ca-file', tls.ca, '--client-cert-auth']
      : []),
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
        const text = tls
          ? await tlsHealth(`${endpoint}/health`, tls)
          : await (await fetch(`${endpoint}/health`, { signal: AbortSignal.timeout(1000) })).text();
        if ((JSON.parse(text) as { health?: string }).health === 'true') return;
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
