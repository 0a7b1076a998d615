// Policy engine control plane: time to resolve the policy of 1,000 endpoints
// under 1,000 rules, the time of an incremental update when one identity
// appears (against recomputing every endpoint, side by side), and map entries
// per endpoint. Pure computation: no root needed. Run on its own with
// `node dist/bench/policy.js [endpoints] [rules]`.
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { LocalIdentityTable, PolicyEngine, parsePolicyText, type Identity, type Policy } from '../src/policy/index.js';
import { summarize, type Summary } from './stats.js';

const NAMESPACES = 10;

export interface PolicyBenchReport {
  endpoints: number;
  identities: number;
  rules: number;
  /** Endpoints registered first, then all rules imported at once. */
  importRules: Summary;
  /** Rules first, then every endpoint joins (each join computes or shares its map). */
  joinEndpoints: Summary;
  /** One more rule imported into the full engine: only the endpoints it selects are recomputed. */
  addRule: Summary;
  regeneratedByRule: number;
  /** One new identity reported: diffs for the endpoints whose selectors select it. */
  addIdentity: Summary;
  /** The same identity, with every endpoint's map computed from scratch (what incrementality saves). */
  addIdentityFull: Summary;
  regeneratedByAdd: number;
  entries: { min: number; median: number; mean: number; max: number; total: number };
}

/** 1,000 rules in the shapes real clusters use: app-to-app, namespace-wide, world/CIDR, deny, NetworkPolicy. */
function policyText(rules: number, apps: number): string {
  const docs: string[] = [];
  for (let j = 0; j < rules; j++) {
    const subject = `app${j % apps}`;
    const peer = `app${(j * 7 + 1) % apps}`;
    const ns = `ns${j % NAMESPACES}`;
    if (j % 4 === 3) {
      docs.push(
        JSON.stringify({
          apiVersion: 'networking.k8s.io/v1',
          kind: 'NetworkPolicy',
          metadata: { name: `np${j}`, namespace: ns },
          spec: {
            podSelector: { matchLabels: { app: subject } },
            policyTypes: ['Ingress'],
            ingress: [{ from: [{ namespaceSelector: { matchLabels: { team: `t${(j + 1) % NAMESPACES}` } }, podSelector: { matchLabels: { app: peer } } }], ports: [{ port: 8000 + (j % 50) }] }],
          },
        }),
      );
      continue;
    }
    const spec: Record<string, unknown> = {
      endpointSelector: { matchLabels: { app: subject } },
      ingress: [{ fromEndpoints: [{ matchLabels: { app: peer } }], toPorts: [{ ports: [{ port: String(80 + (j % 20)), protocol: 'TCP' }, { port: '9000', endPort: 9010, protocol: 'TCP' }] }] }],
      egress: [{ toEndpoints: [{ matchLabels: { app: `app${(j * 13 + 5) % apps}` } }], toPorts: [{ ports: [{ port: '5432', protocol: 'TCP' }] }] }],
    };
    if (j % 10 === 0) (spec.egress as unknown[]).push({ toCIDRSet: [{ cidr: `10.${j % 256}.0.0/16`, except: [`10.${j % 256}.1.0/24`] }] });
    if (j % 25 === 0) (spec.ingress as unknown[]).push({ fromEndpoints: [{ matchLabels: { 'k8s:io.kubernetes.pod.namespace': ns } }] });
    if (j % 20 === 0) spec.ingressDeny = [{ fromEntities: ['world'], toPorts: [{ ports: [{ port: '22', protocol: 'TCP' }] }] }];
    docs.push(JSON.stringify({ apiVersion: 'tendril.io/v1', kind: 'TendrilClusterwideNetworkPolicy', metadata: { name: `r${j}` }, spec }));
  }
  return docs.join('\n---\n');
}

interface Fixture {
  ids: LocalIdentityTable;
  pods: Identity[];
  policies: Policy[];
}

function fixture(endpoints: number, rules: number): Fixture {
  const ids = new LocalIdentityTable();
  // Four replicas per identity, as Deployments do.
  const apps = Math.max(1, Math.floor(endpoints / 4));
  const pods: Identity[] = [];
  for (let i = 0; i < endpoints; i++) {
    const app = i % apps;
    pods.push(ids.allocatePod(`ns${app % NAMESPACES}`, { app: `app${app}` }, { team: `t${app % NAMESPACES}` }));
  }
  return { ids, pods, policies: parsePolicyText(policyText(rules, apps)) };
}

function engineWithEndpoints(f: Fixture): PolicyEngine {
  const engine = new PolicyEngine({ identities: f.ids, cidrIdentities: f.ids });
  f.pods.forEach((p, i) => engine.upsertEndpoint({ id: i + 1, identity: p.id }));
  return engine;
}

function time(fn: () => void): number {
  const t0 = performance.now();
  fn();
  return performance.now() - t0;
}

export function runPolicyBench(endpoints = 1000, rules = 1000, iterations = 9): PolicyBenchReport {
  const f = fixture(endpoints, rules);
  const importRules: number[] = [];
  const joinEndpoints: number[] = [];
  const addIdentity: number[] = [];
  const addIdentityFull: number[] = [];
  const addRule: number[] = [];
  let regeneratedByAdd = 0;
  let regeneratedByRule = 0;
  let counts: number[] = [];
  for (let it = 0; it < iterations; it++) {
    const engine = engineWithEndpoints(f);
    importRules.push(time(() => engine.upsertPolicies(f.policies)));

    const later = new PolicyEngine({ identities: f.ids, cidrIdentities: f.ids });
    later.upsertPolicies(f.policies);
    joinEndpoints.push(time(() => f.pods.forEach((p, i) => later.upsertEndpoint({ id: i + 1, identity: p.id }))));

    // A new replica set of app1 (new identity: extra label) — selected by the rules that name app1 and its namespace.
    const fresh = f.ids.allocatePod('ns1', { app: 'app1', version: `v${it + 2}` }, { team: 't1' });
    addIdentity.push(
      time(() => {
        regeneratedByAdd = engine.identitiesChanged([fresh]).regenerations.length;
      }),
    );
    // Baseline: the same change handled by recomputing every endpoint (a fresh engine sees the identity from the start).
    addIdentityFull.push(
      time(() => {
        const full = new PolicyEngine({ identities: f.ids, cidrIdentities: f.ids });
        full.upsertPolicies(f.policies);
        f.pods.forEach((p, i) => full.upsertEndpoint({ id: i + 1, identity: p.id }));
      }),
    );
    const extra = parsePolicyText(
      JSON.stringify({
        apiVersion: 'tendril.io/v1',
        kind: 'TendrilClusterwideNetworkPolicy',
        metadata: { name: `extra${it}` },
        spec: { endpointSelector: { matchLabels: { app: 'app2' } }, ingress: [{ fromEndpoints: [{ matchLabels: { app: 'app3' } }], toPorts: [{ ports: [{ port: '7000', protocol: 'TCP' }] }] }] },
      }),
    );
    addRule.push(
      time(() => {
        regeneratedByRule = engine.upsertPolicies(extra).regenerations.length;
      }),
    );
    counts = engine.endpointIds().map((id) => engine.endpointPolicy(id).entries.length);
    f.ids.release(fresh.id);
  }
  const sorted = [...counts].sort((a, b) => a - b);
  const total = counts.reduce((a, b) => a + b, 0);
  return {
    endpoints,
    identities: new Set(f.pods.map((p) => p.id)).size,
    rules,
    importRules: summarize(importRules),
    joinEndpoints: summarize(joinEndpoints),
    addRule: summarize(addRule),
    regeneratedByRule,
    addIdentity: summarize(addIdentity),
    addIdentityFull: summarize(addIdentityFull),
    regeneratedByAdd,
    entries: { min: sorted[0] ?? 0, median: sorted[Math.floor(sorted.length / 2)] ?? 0, mean: total / Math.max(1, counts.length), max: sorted.at(-1) ?? 0, total },
  };
}

export function printPolicyBench(r: PolicyBenchReport): void {
  const row = (label: string, s: Summary) => console.log(`  ${label.padEnd(48)} ${s.median.toFixed(2).padStart(9)} ms ${s.p90.toFixed(2).padStart(9)} ms`);
  console.log(`policy engine: ${r.endpoints} endpoints (${r.identities} identities), ${r.rules} rules, ${r.importRules.n} runs`);
  console.log(`  ${'measurement'.padEnd(48)} ${'median'.padStart(12)} ${'p90'.padStart(12)}`);
  row(`import ${r.rules} rules over ${r.endpoints} endpoints`, r.importRules);
  row(`${r.endpoints} endpoints join under ${r.rules} rules`, r.joinEndpoints);
  row(`add 1 rule (${r.regeneratedByRule} endpoints regenerated)`, r.addRule);
  row(`add 1 identity, incremental (${r.regeneratedByAdd} endpoints)`, r.addIdentity);
  row('add 1 identity, recompute every endpoint', r.addIdentityFull);
  console.log(`  ${'incremental vs recompute (median ratio)'.padEnd(48)} ${(r.addIdentityFull.median / r.addIdentity.median).toFixed(0).padStart(9)} x`);
  const e = r.entries;
  console.log(`  map entries per endpoint: min ${e.min}, median ${e.median}, mean ${e.mean.toFixed(1)}, max ${e.max} (total ${e.total})`);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const endpoints = Number(process.argv[2] ?? 1000);
  const rules = Number(process.argv[3] ?? 1000);
  printPolicyBench(runPolicyBench(endpoints, rules));
}
