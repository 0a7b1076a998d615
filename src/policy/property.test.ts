// Property: for random rule sets, modes and flows, the verdict the datapath
// reads from the computed map state equals a direct evaluation of the rules —
// also when identities arrive after the policy and the map is built from diffs.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { evaluateDirection } from './evaluate.js';
import { formatMapKey } from './mapState.js';
import { TestWorld } from './testing/world.js';
import { Proto, type Direction, type EnforcementMode, type Identity, type NamedPort } from './types.js';

const APPS = ['a', 'b', 'c'];
const NAMESPACES = ['x', 'y'];
const PORTS = [0, 53, 80, 443, 8080];
const CIDRS: Array<{ cidr: string; except?: string[] }> = [
  { cidr: '10.0.0.0/8' },
  { cidr: '10.0.0.0/8', except: ['10.1.0.0/16'] },
  { cidr: '10.1.2.0/24' },
  { cidr: '0.0.0.0/0', except: ['10.0.0.0/8'] },
  { cidr: '192.0.2.1/32' },
];
const ENTITIES = ['all', 'world', 'cluster', 'host', 'remote-node', 'health'];

const selectorArb = fc.oneof(
  fc.constant({}),
  fc.constantFrom(...APPS).map((app) => ({ matchLabels: { app } })),
  fc.record({ ns: fc.constantFrom(...NAMESPACES), op: fc.constantFrom('In', 'NotIn') }).map(({ ns, op }) => ({
    matchExpressions: [{ key: 'k8s:io.kubernetes.pod.namespace', operator: op, values: [ns] }],
  })),
  fc.constantFrom('Exists', 'DoesNotExist').map((op) => ({ matchExpressions: [{ key: 'tier', operator: op }] })),
);

const portArb = fc.oneof(
  fc.record({
    port: fc.constantFrom(...PORTS).map(String),
    protocol: fc.constantFrom('TCP', 'UDP', 'ANY'),
  }),
  fc.record({ port: fc.constantFrom(79, 440, 8000), span: fc.integer({ min: 1, max: 100 }), protocol: fc.constantFrom('TCP', 'UDP', 'ANY') }).map((p) => ({
    port: String(p.port),
    endPort: p.port + p.span,
    protocol: p.protocol,
  })),
  fc.constant({ port: 'http', protocol: 'TCP' }),
);

function peerRuleArb(dir: 'from' | 'to') {
  return fc
    .record(
      {
        [`${dir}Endpoints`]: fc.array(selectorArb, { minLength: 1, maxLength: 2 }),
        [`${dir}Entities`]: fc.array(fc.constantFrom(...ENTITIES), { minLength: 1, maxLength: 2 }),
        [`${dir}CIDRSet`]: fc.array(fc.constantFrom(...CIDRS), { minLength: 1, maxLength: 2 }),
        toPorts: fc.array(portArb, { minLength: 1, maxLength: 3 }).map((ports) => [{ ports }]),
      },
      { requiredKeys: [] },
    );
}

const ruleArb = fc.record(
  {
    endpointSelector: selectorArb,
    ingress: fc.array(peerRuleArb('from'), { maxLength: 3 }),
    ingressDeny: fc.array(peerRuleArb('from'), { maxLength: 2 }),
    egress: fc.array(peerRuleArb('to'), { maxLength: 3 }),
    egressDeny: fc.array(peerRuleArb('to'), { maxLength: 2 }),
    enableDefaultDeny: fc.record({ ingress: fc.boolean(), egress: fc.boolean() }, { requiredKeys: [] }),
  },
  { requiredKeys: ['endpointSelector'] },
);

const k8sPeerArb = fc.oneof(
  fc.record({ podSelector: selectorArb.filter((s) => !('matchExpressions' in s) || !JSON.stringify(s).includes('namespace')) }),
  fc.record({ namespaceSelector: fc.constantFrom({}, { matchLabels: { team: 'x' } }) }),
  fc.record({ podSelector: fc.constantFrom(...APPS).map((app) => ({ matchLabels: { app } })), namespaceSelector: fc.constantFrom({}, { matchLabels: { team: 'y' } }) }),
  fc.constantFrom(...CIDRS).map((c) => ({ ipBlock: c })),
);
const k8sPortArb = fc.record(
  { protocol: fc.constantFrom('TCP', 'UDP'), port: fc.constantFrom(53, 80, 443, 'http'), endPort: fc.constantFrom(90, 8080) },
  { requiredKeys: [] },
).filter((p) => p.endPort === undefined || (typeof p.port === 'number' && p.endPort >= p.port));
const k8sRuleArb = fc.record({
  podSelector: fc.constantFrom({}, { matchLabels: { app: 'a' } }, { matchLabels: { app: 'b' } }),
  ingress: fc.array(fc.record({ from: fc.array(k8sPeerArb, { maxLength: 2 }), ports: fc.array(k8sPortArb, { maxLength: 2 }) }, { requiredKeys: [] }), { maxLength: 2 }),
  egress: fc.array(fc.record({ to: fc.array(k8sPeerArb, { maxLength: 2 }), ports: fc.array(k8sPortArb, { maxLength: 2 }) }, { requiredKeys: [] }), { maxLength: 2 }),
  policyTypes: fc.option(fc.subarray(['Ingress', 'Egress'], { minLength: 1 }), { nil: undefined }),
});

function documents(rules: object[], k8s: object[]): string {
  const docs = [
    ...rules.map((spec, i) => ({ apiVersion: 'tendril.io/v1', kind: 'TendrilClusterwideNetworkPolicy', metadata: { name: `r${i}` }, spec })),
    ...k8s.map((spec, i) => ({
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: `k${i}`, namespace: NAMESPACES[i % 2] },
      spec: Object.fromEntries(Object.entries(spec).filter(([, v]) => v !== undefined)),
    })),
  ];
  return docs.map((d) => JSON.stringify(d)).join('\n---\n');
}

const HTTP: NamedPort[] = [{ name: 'http', port: 8080, protocol: 'TCP' }];

interface Scenario {
  rules: object[];
  k8s: object[];
  mode: EnforcementMode;
  allowLocalhost: boolean;
  /** Pods created before the policy is imported; the rest arrive after (incremental path). */
  podsFirst: number;
}

const scenarioArb: fc.Arbitrary<Scenario> = fc.record({
  rules: fc.array(ruleArb, { maxLength: 4 }),
  k8s: fc.array(k8sRuleArb, { maxLength: 2 }),
  mode: fc.constantFrom<EnforcementMode>('default', 'default', 'always', 'never'),
  allowLocalhost: fc.boolean(),
  podsFirst: fc.integer({ min: 0, max: 7 }),
});

function build(s: Scenario): { w: TestWorld; endpoints: Array<{ id: number; identity: Identity; namedPorts: NamedPort[] }> } {
  const w = new TestWorld({ enforcementMode: s.mode, allowLocalhost: s.allowLocalhost });
  const pods: Array<() => void> = [];
  const endpoints: Array<{ id: number; identity: Identity; namedPorts: NamedPort[] }> = [];
  let n = 0;
  for (const ns of NAMESPACES) {
    for (const app of APPS) {
      const i = n++;
      pods.push(() => {
        const labels: Record<string, string> = app === 'c' ? { app, tier: 'back' } : { app };
        const namedPorts = app === 'b' ? HTTP : [];
        const p = w.pod(`${ns}/${app}`, labels, { namespaceLabels: { team: ns }, namedPorts });
        endpoints[i] = { id: p.endpointId, identity: p.identity, namedPorts };
      });
    }
  }
  pods.slice(0, s.podsFirst).forEach((f) => f());
  w.import(documents(s.rules, s.k8s));
  pods.slice(s.podsFirst).forEach((f) => f());
  // A remote pod that arrives last: only its selector memberships change.
  w.remote(['k8s:app=a', 'k8s:io.kubernetes.pod.namespace=z']);
  return { w, endpoints: endpoints.filter((e) => e !== undefined) };
}

describe('map state agrees with the rules', () => {
  test('random policies, modes and flows', () => {
    fc.assert(
      fc.property(
        scenarioArb,
        fc.array(
          fc.record({
            endpoint: fc.nat(5),
            direction: fc.constantFrom<Direction>('ingress', 'egress'),
            peer: fc.nat(),
            proto: fc.constantFrom(Proto.TCP, Proto.UDP, Proto.SCTP, Proto.ICMP),
            port: fc.oneof(fc.constantFrom(1, 53, 79, 80, 90, 443, 444, 540, 8000, 8080, 8100, 65535), fc.integer({ min: 1, max: 65535 })),
          }),
          { minLength: 20, maxLength: 40 },
        ),
        (scenario, flows) => {
          const { w, endpoints } = build(scenario);
          const ids = [...w.identities.list()];
          const ctx = w.engine.evaluationContext();
          for (const f of flows) {
            const ep = endpoints[f.endpoint % endpoints.length]!;
            const peer = ids[f.peer % ids.length]!;
            const port = f.proto === Proto.ICMP ? 0 : f.port;
            const want = evaluateDirection(ctx, { labels: ep.identity.labels, namedPorts: ep.namedPorts }, f.direction, peer.labels, f.proto, port);
            const got = w.engine.lookup(ep.id, f.direction, peer.id, f.proto, port);
            const held = w.datapath.get(ep.id)!.lookup(f.direction, peer.id, f.proto, port);
            const where = `endpoint ${ep.id} (${ep.identity.labels}) ${f.direction} peer ${peer.id} (${peer.labels}) proto ${f.proto} port ${port}`;
            assert.equal(got.verdict, want.verdict, `${where}: map entry ${got.entry === undefined ? 'none' : formatMapKey(got.entry.key)}, rules say ${want.reason}`);
            assert.equal(held?.verdict ?? 'deny', want.verdict, `${where}: datapath built from diffs disagrees`);
          }
          // The datapath built from diffs holds exactly the computed entries.
          for (const ep of endpoints) {
            const computed = w.engine.endpointPolicy(ep.id).entries.map((e) => `${formatMapKey(e.key)} ${e.verdict}`).sort();
            const held = [...w.datapath.get(ep.id)!.entries()].map((e) => `${formatMapKey(e.key)} ${e.verdict}`).sort();
            assert.deepEqual(held, computed, `endpoint ${ep.id}: diffs do not add up to the state`);
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});

type Op =
  | { kind: 'import'; slot: number; spec: object }
  | { kind: 'importK8s'; slot: number; spec: object }
  | { kind: 'delete'; slot: number }
  | { kind: 'pod'; app: number; ns: number; extra: boolean }
  | { kind: 'removePod'; index: number }
  | { kind: 'remote'; app: number; ns: number }
  | { kind: 'removeRemote'; index: number }
  | { kind: 'mode'; mode: EnforcementMode };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('import' as const), slot: fc.nat(3), spec: ruleArb }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('importK8s' as const), slot: fc.nat(1), spec: k8sRuleArb }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('delete' as const), slot: fc.nat(5) }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('pod' as const), app: fc.nat(2), ns: fc.nat(1), extra: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('removePod' as const), index: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('remote' as const), app: fc.nat(2), ns: fc.nat(1) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('removeRemote' as const), index: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('mode' as const), mode: fc.constantFrom<EnforcementMode>('default', 'always', 'never') }) },
);

describe('incremental updates agree with the rules', () => {
  test('random sequences of policy, identity, endpoint and mode changes', () => {
    fc.assert(
      fc.property(fc.array(opArb, { minLength: 5, maxLength: 25 }), fc.integer({ min: 0, max: 1 << 30 }), (ops, seed) => {
        const w = new TestWorld();
        const live: Array<{ id: number; identity: Identity; namedPorts: NamedPort[] }> = [];
        const remotes: Identity[] = [];
        const slots = new Set<string>();
        let nextEp = 1000;
        let pick = seed;
        for (const op of ops) {
          switch (op.kind) {
            case 'import':
            case 'importK8s': {
              const name = op.kind === 'import' ? `r${op.slot}` : `k${op.slot}`;
              const text =
                op.kind === 'import'
                  ? JSON.stringify({ apiVersion: 'tendril.io/v1', kind: 'TendrilClusterwideNetworkPolicy', metadata: { name }, spec: op.spec })
                  : documents([], [op.spec]).replace('"name":"k0"', `"name":"${name}"`);
              w.import(text);
              slots.add(name);
              break;
            }
            case 'delete': {
              const name = [...slots].sort()[op.slot % Math.max(1, slots.size)];
              if (name === undefined) break;
              w.apply(w.engine.deletePolicies({ name }).regenerations);
              slots.delete(name);
              break;
            }
            case 'pod': {
              const labels: Record<string, string> = { app: APPS[op.app]!, ...(op.extra ? { tier: 'back' } : {}) };
              const identity = w.identities.allocatePod(NAMESPACES[op.ns]!, labels, { team: NAMESPACES[op.ns]! });
              const namedPorts = op.app === 1 ? HTTP : [];
              const id = nextEp++;
              w.apply(w.engine.upsertEndpoint({ id, identity: identity.id, namedPorts }).regenerations);
              live.push({ id, identity, namedPorts });
              break;
            }
            case 'removePod': {
              if (live.length === 0) break;
              const [ep] = live.splice(op.index % live.length, 1);
              w.apply(w.engine.removeEndpoint(ep!.id).regenerations);
              w.datapath.delete(ep!.id);
              break;
            }
            case 'remote':
              remotes.push(w.remote([`k8s:app=${APPS[op.app]}`, `k8s:io.kubernetes.pod.namespace=r${op.ns}`, `k8s:n=${nextEp++}`]));
              break;
            case 'removeRemote': {
              if (remotes.length === 0) break;
              const [gone] = remotes.splice(op.index % remotes.length, 1);
              w.identities.release(gone!.id);
              w.apply(w.engine.identitiesChanged([], [gone!.id]).regenerations);
              break;
            }
            case 'mode':
              w.apply(w.engine.setEnforcementMode(op.mode).regenerations);
              break;
          }
          // After every step: the diffs handed out add up to the computed maps, and the maps agree with the rules.
          const ctx = w.engine.evaluationContext();
          const ids = [...w.identities.list()];
          for (const ep of live) {
            const computed = w.engine.endpointPolicy(ep.id).entries.map((e) => `${formatMapKey(e.key)} ${e.verdict}`).sort();
            const held = [...(w.datapath.get(ep.id)?.entries() ?? [])].map((e) => `${formatMapKey(e.key)} ${e.verdict}`).sort();
            assert.deepEqual(held, computed, `after ${op.kind}: endpoint ${ep.id} diffs do not add up`);
            for (let i = 0; i < 6; i++) {
              pick = (pick * 1103515245 + 12345) % 2147483648;
              const peer = ids[pick % ids.length]!;
              const direction: Direction = pick % 2 === 0 ? 'ingress' : 'egress';
              const proto = [Proto.TCP, Proto.UDP, Proto.ICMP][pick % 3]!;
              const port = proto === Proto.ICMP ? 0 : [53, 80, 85, 443, 8080, 9999][(pick >> 3) % 6]!;
              const want = evaluateDirection(ctx, { labels: ep.identity.labels, namedPorts: ep.namedPorts }, direction, peer.labels, proto, port);
              const got = w.engine.lookup(ep.id, direction, peer.id, proto, port);
              assert.equal(got.verdict, want.verdict, `after ${op.kind}: endpoint ${ep.id} ${direction} peer ${peer.id} (${peer.labels}) ${proto}/${port}: rules say ${want.reason}`);
            }
          }
        }
      }),
      { numRuns: 100 },
    );
  });
});
