// `tendril relay` under load: 3 node flow servers (bench/relayGenerator.ts, a
// generator replaying 10,000 flows/s each, in its own process) merged by the
// real relay (`tendril relay --peer …`, its own process) to one following
// client. Reports what the client got per second against what was offered,
// the flows lost on the way (the relay's client too slow, or the relay too
// slow for a node), order kept, and the relay's CPU and RSS.
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { availableParallelism, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { get as httpGet } from 'node:http';
import { getText } from '../src/client/ndjsonStream.js';

const CLI = fileURLToPath(new URL('../bundle/tendril.js', import.meta.url));
const GENERATOR = fileURLToPath(new URL('./relayGenerator.js', import.meta.url));

export interface RelayBenchReport {
  nodes: number;
  offeredPerS: number;
  seconds: number;
  deliveredPerS: number;
  /** Flows told lost in `lost` lines (by the relay or by a node toward the relay). */
  lost: number;
  /** Flows that came out earlier in time than the one before them. */
  outOfOrder: number;
  relayCpuPercent: number;
  relayRssMb: number;
  reorderWindowMs: number;
  /** The machine's 1-minute load average at the end (other work competes for the same cores). */
  loadAverage: number;
  /** The relay's own counts over the whole run (GET /healthz). */
  counters: { flowsReceived: number; flowsSent: number; flowsLost: number; nodeFlowsLost: number };
}

/** utime + stime of a process, in seconds. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}

/** The first stdout (or stderr) line matching `re`, from a child that is starting. */
function waitFor(child: ChildProcess, stream: 'stdout' | 'stderr', re: RegExp, what: string): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    let text = '';
    const timer = setTimeout(() => reject(new Error(`${what}: not ready after 20 s: ${text.slice(-1000)}`)), 20_000);
    child[stream]!.on('data', (c: Buffer) => {
      text += c.toString();
      const m = re.exec(text);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    });
    child.once('exit', (code) => reject(new Error(`${what} exited ${code}: ${text.slice(-1000)}`)));
  });
}

async function stop(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null) return;
  child.kill('SIGTERM');
  await new Promise((r) => child.once('exit', r));
}

export async function runRelayBench(o: { nodes?: number; ratePerNode?: number; seconds?: number; warmupSeconds?: number; reorderWindowMs?: number } = {}): Promise<RelayBenchReport> {
  const nodes = o.nodes ?? 3;
  // TENDRIL_BENCH_RELAY_RATE: another rate per node, to find the one the relay keeps up with on this machine.
  const rate = o.ratePerNode ?? Number(process.env.TENDRIL_BENCH_RELAY_RATE ?? 10_000);
  const seconds = o.seconds ?? 10;
  const warmup = o.warmupSeconds ?? 2;
  const windowMs = o.reorderWindowMs ?? 300;
  let generator: ChildProcess | undefined;
  let relay: ChildProcess | undefined;
  const abort = new AbortController();
  try {
    generator = spawn(process.execPath, [GENERATOR, String(nodes), String(rate)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const ports = (JSON.parse((await waitFor(generator, 'stdout', /^(\{.*\})\n/m, 'flow generator'))[1]!) as { ports: number[] }).ports;
    relay = spawn(process.execPath, [CLI, 'relay', '--listen-addr', '127.0.0.1:0', '--reorder-window', String(windowMs), ...ports.flatMap((p, i) => ['--peer', `gen-${i}=http://127.0.0.1:${p}`])], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, TENDRIL_LOG_LEVEL: 'warn' },
    });
    const port = Number((await waitFor(relay, 'stderr', /serving on 127\.0\.0\.1:(\d+)/, 'relay'))[1]);
    let flows = 0;
    let lost = 0;
    let outOfOrder = 0;
    let lastTime = 0;
    let counting = false;
    // The client reads as `tendril observe -o json` would, less the JSON parse of each flow (the relay is measured, not the client):
    // a flow's event time is found in its text, other lines are parsed.
    const stream = new Promise<void>((resolve, reject) => {
      const req = httpGet({ host: '127.0.0.1', port, path: '/v1/flows?last=0&follow=true', signal: abort.signal }, (res) => {
        res.setEncoding('utf8');
        let partial = '';
        res.on('data', (chunk: string) => {
          const lines = (partial + chunk).split('\n');
          partial = lines.pop() ?? '';
          for (const text of lines) {
            if (text.startsWith('{"flow":')) {
              const at = text.indexOf('"time":"', text.indexOf('"event":'));
              const t = Date.parse(text.slice(at + 8, at + 32));
              if (t < lastTime) outOfOrder++;
              lastTime = t;
              if (counting) flows++;
            } else if (text.startsWith('{"lost":') && counting) lost += (JSON.parse(text) as { lost: { count: number } }).lost.count;
          }
        });
        res.on('end', resolve);
        res.on('error', () => resolve());
      });
      req.on('error', (err) => (abort.signal.aborted ? resolve() : reject(err)));
    });
    await new Promise((r) => setTimeout(r, warmup * 1000));
    const pid = relay.pid!;
    const cpu0 = cpuSeconds(pid);
    const t0 = performance.now();
    counting = true;
    await new Promise((r) => setTimeout(r, seconds * 1000));
    counting = false;
    const elapsed = (performance.now() - t0) / 1000;
    const cpu = ((cpuSeconds(pid) - cpu0) / elapsed) * 100;
    const rss = rssMb(pid);
    const health = await getText({ url: new URL(`http://127.0.0.1:${port}`) }, '/healthz');
    const counters = (JSON.parse(health.text) as { counters: RelayBenchReport['counters'] }).counters;
    abort.abort();
    await stream;
    return { nodes, offeredPerS: nodes * rate, seconds, deliveredPerS: flows / elapsed, lost, outOfOrder, relayCpuPercent: cpu, relayRssMb: rss, reorderWindowMs: windowMs, counters, loadAverage: loadavg()[0]! };
  } finally {
    abort.abort();
    await stop(relay);
    await stop(generator);
  }
}

export function printRelay(r: RelayBenchReport): void {
  console.log(`\nRelay: ${r.nodes} node flow servers at ${(r.offeredPerS / r.nodes).toLocaleString('en')} flows/s each, merged by tendril relay to one following client, ${r.seconds} s (reorder window ${r.reorderWindowMs} ms)`);
  console.log(`  offered              ${r.offeredPerS.toFixed(0).padStart(8)} flows/s`);
  console.log(`  delivered            ${r.deliveredPerS.toFixed(0).padStart(8)} flows/s  ${(r.deliveredPerS / r.offeredPerS).toFixed(2)}x offered`);
  console.log(`  lost (told)          ${String(r.lost).padStart(8)} flows`);
  console.log(`  out of time order    ${String(r.outOfOrder).padStart(8)} flows`);
  const c = r.counters;
  console.log(`  relay's counts       received ${c.flowsReceived}, sent ${c.flowsSent}, lost toward its client ${c.flowsLost}, lost by the nodes toward it ${c.nodeFlowsLost} (whole run)`);
  console.log(`  relay CPU            ${r.relayCpuPercent.toFixed(0).padStart(8)} % of a core, RSS ${r.relayRssMb.toFixed(0)} MB (load average ${r.loadAverage.toFixed(1)} on ${availableParallelism()} cores)`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  printRelay(await runRelayBench());
}
