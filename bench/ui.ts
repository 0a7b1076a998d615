// The flow UI's first paint with a full view: 10,000 flows over 200
// workloads in 10 namespaces (and the world), served by a synthetic flows
// server (the flows are generated, no agent runs), the page loaded in
// headless Chromium at 1366×768. Measured in the page: the first contentful
// paint, and the time from navigation until the map holds every workload
// and the table its rows (all 10,000 flows parsed, aggregated and drawn).
import { pathToFileURL } from 'node:url';
import type { MonitorPeer } from '../src/monitor/types.js';
import { type Flow, flowVerdictOf, foldKey } from '../src/flow/index.js';
import { launchChromium } from '../test/support/browser.js';
import { startFlowUiServer } from '../test/support/flowUiServer.js';
import { type Summary, summarize } from './stats.js';

export interface UiBenchReport {
  flows: number;
  workloads: number;
  edges: number;
  firstContentfulPaint: Summary;
  mapAndTable: Summary;
}

/** `n` flows among `workloads` pods (`namespaces` namespaces) and the world; one in 12 a policy drop. */
export function syntheticFlows(n: number, workloads: number, namespaces: number): Flow[] {
  const pods: MonitorPeer[] = Array.from({ length: workloads }, (_, i) => {
    const ns = `team-${i % namespaces}`;
    return { endpoint: i + 1, pod: { namespace: ns, name: `app-${i}-5d8f` }, identity: 30_000 + i, labels: [`k8s:app=app-${i}`, `k8s:io.kubernetes.pod.namespace=${ns}`], ip: `10.20.${i >> 8}.${i & 255}`, port: 0 };
  });
  const world: MonitorPeer = { identity: 2, labels: ['reserved:world'], ip: '198.51.100.7', port: 443 };
  const start = Date.parse('2026-11-29T12:00:00Z');
  return Array.from({ length: n }, (_, i) => {
    const src = pods[i % workloads]!;
    const dst = i % 50 === 0 ? world : pods[(i * 7 + 3 + (i % 3)) % workloads]!;
    const drop = i % 12 === 0;
    const time = new Date(start + i * 10).toISOString();
    const event = {
      type: drop ? ('drop' as const) : ('policy-verdict' as const),
      time,
      ...(drop ? { drop: { reason: 'POLICY_DENY', code: 133, text: 'policy denied' } } : { verdict: 'allowed' as const }),
      direction: 'ingress' as const,
      source: { ...src, port: 30_000 + (i % 20_000) },
      destination: { ...dst, port: dst === world ? 443 : 8080 + (i % 4) },
      protocol: 'tcp',
      tcpFlags: ['SYN'],
      interface: { ifindex: 3 },
      length: 74,
      rule: { cookie: 7, text: `NetworkPolicy/${dst.pod?.namespace ?? 'x'}/guard spec.ingress[0]`, origins: [] },
    };
    return { node: 'node-a', verdict: flowVerdictOf(event), count: 1 + (i % 5), firstTime: time, event };
  });
}

export async function runUiBench(runs = 5): Promise<UiBenchReport> {
  const flows = syntheticFlows(10_000, 200, 10);
  const body = flows.map((f) => `${JSON.stringify({ flow: f })}\n`).join('');
  // The page holds a flow sent twice (a drop's retries from other ports fold) once, as the agent would.
  const distinct = new Set(flows.map((f) => foldKey(f.event, f.verdict))).size;
  const server = await startFlowUiServer((app) => {
    app.get('/v1/flows', async (_req, reply) => reply.type('application/x-ndjson').send(body));
    app.get('/v1/policy', async () => ({ revision: 1, clusterRevision: 0, policies: [] }));
  });
  const browser = await launchChromium();
  const fcp: number[] = [];
  const ready: number[] = [];
  let workloads = 0;
  let edges = 0;
  try {
    for (let run = 0; run < runs; run++) {
      const context = await browser.newContext({ viewport: { width: 1366, height: 768 } });
      const page = await context.newPage();
      await page.goto(server.url);
      // Page code as text: it runs in the browser, with the DOM this program's types do not have.
      const t = await page.waitForFunction(
        `(() => {
          const app = document.querySelector('.app');
          if (app?.dataset.flows !== '${distinct}' || document.querySelectorAll('.workload').length < 200 || document.querySelector('.flow-row') === null) return false;
          return performance.now();
        })()`,
        undefined,
        { polling: 'raf', timeout: 60_000 },
      );
      ready.push((await t.jsonValue()) as number);
      fcp.push(await page.evaluate<number>("performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? NaN"));
      workloads = await page.locator('.workload').count();
      edges = await page.locator('path.edge').count();
      await context.close();
    }
  } finally {
    await browser.close();
    await server.close();
  }
  return { flows: distinct, workloads, edges, firstContentfulPaint: summarize(fcp), mapAndTable: summarize(ready) };
}

export function printUiBench(r: UiBenchReport): void {
  const row = (label: string, s: Summary) => console.log(`  ${label.padEnd(52)} ${s.median.toFixed(0).padStart(7)} ms ${s.p90.toFixed(0).padStart(7)} ms`);
  console.log(`flow UI: ${r.flows} flows, ${r.workloads} workloads, ${r.edges} edges, headless Chromium 1366×768, ${r.mapAndTable.n} page loads`);
  console.log(`  ${'measurement (from navigation start)'.padEnd(52)} ${'median'.padStart(10)} ${'p90'.padStart(10)}`);
  row('first contentful paint', r.firstContentfulPaint);
  row(`map (${r.workloads} workloads) and table drawn with every flow`, r.mapAndTable);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  printUiBench(await runUiBench(Number(process.argv[2] ?? 5)));
}
