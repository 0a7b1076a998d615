// The TCP load of the policy benchmarks, run inside a pod's namespace (nsenter):
// the same client code for tendril and its baseline, so the client costs both
// sides the same. One mode per invocation, results as JSON on stdout:
//   serve <ip> <port>                     1-byte echo server; answers then closes first (its TIME_WAIT, not the client's ports)
//   crr <ip> <port> <ms> <concurrency>    connect, 1-byte request, response, close, in a loop (netperf's TCP_CRR)
//   rr <ip> <port> <ms>                   1-byte request/response on one connection (netperf's TCP_RR)
//   session                               a client kept running: one JSON command a line on stdin
//                                         ({"op":"crr"|"rr","ip","port","ms","concurrency"}), one JSON result a line
//                                         (no process start per sample, so samples can be short and many)
//   check <ip> <port> <timeoutMs>         one connection attempt: connected, refused (RST: nothing dropped it) or timeout (dropped)
//   probe <ip> <port> <everyMs> <timeoutMs>
//                                         a new connection attempt every `everyMs`, each abandoned after `timeoutMs`;
//                                         streams one line per attempt: `<start hrtime ns> <1 ok | 0 failed>` until stdin closes
import { createServer, connect, type Socket } from 'node:net';

const [mode, ipArg, portText, ...rest] = process.argv.slice(2);
let ip = ipArg;
let port = Number(portText);
if (!mode || (mode !== 'session' && (!ip || !Number.isInteger(port)))) {
  console.error('usage: tcpWorker serve|crr|rr|probe <ip> <port> …');
  process.exit(2);
}

const nowNs = () => process.hrtime.bigint();

function serve(): void {
  const server = createServer({ noDelay: true }, (s) => {
    s.on('error', () => undefined);
    // 'crr' peers get one answer and a FIN; 'rr' peers keep the connection (a leading 'k').
    s.on('data', (d) => {
      if (d[0] === 0x6b) s.write(d.subarray(0, 1));
      else s.end(d.subarray(0, 1));
    });
  });
  server.listen({ host: ip, port, backlog: 4096 }, () => process.stdout.write('ready\n'));
  process.stdin.on('end', () => process.exit(0));
  process.stdin.resume();
}

/** One CRR transaction; resolves with its latency in µs, or rejects. */
function transaction(): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = nowNs();
    const s: Socket = connect({ host: ip!, port, noDelay: true });
    s.on('connect', () => s.write('x'));
    s.once('data', () => {
      const us = Number(nowNs() - t0) / 1000;
      s.destroy();
      resolve(us);
    });
    s.on('error', (err) => {
      s.destroy();
      reject(err);
    });
  });
}

async function crr(ms: number, concurrency: number): Promise<string> {
  const latencies: number[] = [];
  let errors = 0;
  const cpu0 = process.cpuUsage();
  const start = nowNs();
  const end = start + BigInt(ms) * 1_000_000n;
  const loop = async () => {
    while (nowNs() < end) {
      try {
        latencies.push(await transaction());
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const seconds = Number(nowNs() - start) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  // cpuUs: this process's CPU (user + system, which carries most of the kernel's packet work on veth).
  return JSON.stringify({ transactions: latencies.length, errors, seconds, cpuUs: cpu.user + cpu.system, latenciesUs: latencies });
}

async function rr(ms: number): Promise<string> {
  const s = connect({ host: ip!, port, noDelay: true });
  await new Promise<void>((resolve, reject) => {
    s.once('connect', resolve);
    s.once('error', reject);
  });
  const latencies: number[] = [];
  const end = nowNs() + BigInt(ms) * 1_000_000n;
  while (nowNs() < end) {
    const t0 = nowNs();
    await new Promise<void>((resolve) => {
      s.once('data', () => resolve());
      s.write('k');
    });
    latencies.push(Number(nowNs() - t0) / 1000);
  }
  s.destroy();
  return JSON.stringify({ transactions: latencies.length, latenciesUs: latencies });
}

async function session(): Promise<void> {
  const { createInterface } = await import('node:readline');
  for await (const line of createInterface({ input: process.stdin })) {
    const cmd = JSON.parse(line) as { op: 'crr' | 'rr'; ip: string; port: number; ms: number; concurrency?: number };
    ip = cmd.ip;
    port = cmd.port;
    process.stdout.write((cmd.op === 'crr' ? await crr(cmd.ms, cmd.concurrency ?? 4) : await rr(cmd.ms)) + '\n');
  }
}

function probe(everyMs: number, timeoutMs: number): void {
  let stopped = false;
  const attempt = () => {
    if (stopped) return;
    const t0 = nowNs();
    const s = connect({ host: ip!, port });
    let done = false;
    const finish = (ok: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      if (!stopped) process.stdout.write(`${t0} ${ok ? 1 : 0}\n`);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    s.on('connect', () => finish(true));
    s.on('error', () => finish(false));
  };
  const interval = setInterval(attempt, everyMs);
  process.stdin.on('end', () => {
    stopped = true;
    clearInterval(interval);
    setTimeout(() => process.exit(0), timeoutMs + 10);
  });
  process.stdin.resume();
}

function check(timeoutMs: number): void {
  const s = connect({ host: ip!, port });
  const done = (result: string) => {
    s.destroy();
    process.stdout.write(JSON.stringify({ result }) + '\n');
    process.exit(0);
  };
  setTimeout(() => done('timeout'), timeoutMs);
  s.on('connect', () => done('connected'));
  s.on('error', (err: NodeJS.ErrnoException) => done(err.code === 'ECONNREFUSED' ? 'refused' : `error ${err.code}`));
}

switch (mode) {
  case 'check':
    check(Number(rest[0] ?? 300));
    break;
  case 'serve':
    serve();
    break;
  case 'crr':
    process.stdout.write((await crr(Number(rest[0] ?? 1000), Number(rest[1] ?? 4))) + '\n');
    break;
  case 'rr':
    process.stdout.write((await rr(Number(rest[0] ?? 1000))) + '\n');
    break;
  case 'session':
    await session();
    break;
  case 'probe':
    probe(Number(rest[0] ?? 1), Number(rest[1] ?? 50));
    break;
  default:
    console.error(`tcpWorker: unknown mode ${mode}`);
    process.exit(2);
}
