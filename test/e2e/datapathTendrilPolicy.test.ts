// tendril policies on real packets: deny beats allow (also a wider deny over a
// narrower wildcard allow), the entities host, world, cluster and all, and
// CIDR rules with except. Every flow is checked by hand and against
// `tendril policy trace`.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { importPolicyAndWait } from '../support/datapathNode.js';
import { type Scene, startScene } from '../support/datapathScene.js';
import { NetnsPool } from '../support/netns.js';
import { type L4Probe, mismatches, type Peer, rowOf, truthTable } from '../support/policyTruthTable.js';
import { reachable } from '../support/reachability.js';
import { requireRoot } from '../support/root.js';
import { tendrilPolicy } from '../support/policyDocuments.js';

requireRoot('the datapath tendril policy test');

const NS = 'tdl-t';
const POD_CIDR = '10.253.0.0/24';
const OUT_NEAR = '10.199.0.10';
const OUT_FAR = '10.199.0.200';

const TCP_PORTS = [22, 80, 9090, 9500];
const UDP_PORTS = [53];
const PROBES: L4Probe[] = [...TCP_PORTS.map((port) => ({ proto: 'tcp' as const, port })), ...UDP_PORTS.map((port) => ({ proto: 'udp' as const, port })), { proto: 'icmp' }];

const TNP = (name: string, spec: string): string => tendrilPolicy(NS, name, spec);

const POLICIES = [
  // db: web may reach it, except on 9000-9999; anyone may reach 9090, but web's wider deny still wins there.
  TNP(
    'db',
    `endpointSelector: {matchLabels: {app: db}}
ingress:
- fromEndpoints: [{matchLabels: {app: web}}]
- toPorts: [{ports: [{port: "9090", protocol: TCP}]}]
ingressDeny:
- fromEndpoints: [{matchLabels: {app: web}}]
  toPorts: [{ports: [{port: "9000", endPort: 9999, protocol: TCP}]}]`,
  ),
  // gate: the node may not reach port 22 (a deny beats allow-localhost); everything else from the node passes.
  TNP('gate', `endpointSelector: {matchLabels: {app: gate}}\ningressDeny:\n- fromEntities: [host]\n  toPorts: [{ports: [{port: "22", protocol: TCP}]}]\ningress:\n- fromEntities: [host]`),
  // incluster: egress to the cluster (pods and the node), not the world.
  TNP('incluster', 'endpointSelector: {matchLabels: {app: incluster}}\negress:\n- toEntities: [cluster]'),
  // outbound: egress to the world only.
  TNP('outbound', 'endpointSelector: {matchLabels: {app: outbound}}\negress:\n- toEntities: [world]'),
  // anywhere: egress enforced, everything allowed, except UDP 53 to the node.
  TNP('anywhere', 'endpointSelector: {matchLabels: {app: anywhere}}\negress:\n- toEntities: [all]\negressDeny:\n- toEntities: [host]\n  toPorts: [{ports: [{port: "53", protocol: UDP}]}]'),
  // public: ingress from the world only (and the node, allow-localhost).
  TNP('public', 'endpointSelector: {matchLabels: {app: public}}\ningress:\n- fromEntities: [world]'),
  // cidrout: egress to 10.199.0.0/24 except its upper half.
  TNP('cidrout', 'endpointSelector: {matchLabels: {app: cidrout}}\negress:\n- toCIDRSet: [{cidr: 10.199.0.0/24, except: [10.199.0.128/25]}]'),
  // cidrin: ingress from one outside address only, on TCP 80.
  TNP('cidrin', `endpointSelector: {matchLabels: {app: cidrin}}\ningress:\n- fromCIDR: [${OUT_FAR}/32]\n  toPorts: [{ports: [{port: "80", protocol: TCP}]}]`),
].join('');

const APPS = ['web', 'db', 'client', 'gate', 'incluster', 'outbound', 'anywhere', 'public', 'cidrout', 'cidrin'];

const pool = new NetnsPool('dpt');
let scene: Scene | undefined;
const peer = (name: string): Peer => {
  const p = scene!.peers.get(name);
  if (!p) throw new Error(`no peer ${name}`);
  return p;
};
const pod = (app: string) => `${NS}/${app}`;
const NEAR = `outside:${OUT_NEAR}`;
const FAR = `outside:${OUT_FAR}`;

before(async () => {
  scene = await startScene(pool, {
    nodeName: 'tdl-node-tp',
    podCidr: POD_CIDR,
    pods: APPS.map((app) => ({ name: app, namespace: NS, labels: { app } })),
    tcpPorts: TCP_PORTS,
    udpPorts: UDP_PORTS,
    // CIDR identities of the policies' prefixes: 10.199.0.0/24, 10.199.0.128/25, 10.199.0.200/32.
    outside: [
      { address: OUT_NEAR, labels: ['cidr:10.199.0.0/24', 'reserved:world'] },
      { address: OUT_FAR, labels: ['cidr:10.199.0.200/32', 'reserved:world'] },
    ],
  });
  await importPolicyAndWait(scene.node, POLICIES);
});

after(async () => {
  if (scene) await scene.cleanup();
  else await pool.cleanup();
});

/** Every flow between the pods, the node and both outside addresses, by hand where it matters and all against the trace. */
test('deny beats allow, entities and CIDR rules: packets equal policy trace', async (t) => {
  const pods = APPS.map((a) => peer(pod(a)));
  const host = peer('host');
  const near = peer(NEAR);
  const far = peer(FAR);
  const pairs: Array<[Peer, Peer]> = [];
  for (const src of pods) {
    for (const dst of pods) if (src !== dst) pairs.push([src, dst]);
    pairs.push([src, host], [host, src], [src, near], [src, far], [near, src], [far, src]);
  }
  const table = await truthTable(scene!.node, pairs, PROBES, { timeoutMs: 400, probeConcurrency: 96 });
  const bad = mismatches(table);
  t.diagnostic(`${table.length} flows, ${table.filter((r) => r.retried).length} allowed ones probed again after a first timeout`);
  assert.deepEqual(bad, [], `${bad.length} of ${table.length} flows differ from the trace`);

  const expect: Array<[string, string, string, boolean, string]> = [
    [pod('web'), pod('db'), 'tcp/80', true, 'web allowed on every port'],
    [pod('web'), pod('db'), 'tcp/9500', false, 'deny 9000-9999 beats the allow'],
    [pod('web'), pod('db'), 'tcp/9090', false, 'a wider deny beats a narrower wildcard allow'],
    [pod('client'), pod('db'), 'tcp/9090', true, 'the wildcard allow for others'],
    [pod('client'), pod('db'), 'tcp/80', false, 'default deny'],
    ['host', pod('gate'), 'tcp/22', false, 'deny from the host beats allow-localhost'],
    ['host', pod('gate'), 'tcp/80', true, 'fromEntities host'],
    [pod('web'), pod('gate'), 'tcp/80', false, 'only the host'],
    [pod('incluster'), pod('web'), 'tcp/80', true, 'cluster: pods'],
    [pod('incluster'), 'host', 'tcp/80', true, 'cluster: the node'],
    [pod('incluster'), NEAR, 'tcp/80', false, 'cluster is not the world'],
    [pod('outbound'), NEAR, 'udp/53', true, 'world: an outside CIDR identity'],
    [pod('outbound'), FAR, 'icmp', true, 'world: another CIDR identity'],
    [pod('outbound'), pod('web'), 'tcp/80', false, 'world is not the pods'],
    [pod('outbound'), 'host', 'icmp', false, 'world is not the node'],
    [pod('anywhere'), NEAR, 'tcp/80', true, 'all'],
    [pod('anywhere'), pod('web'), 'tcp/80', true, 'all'],
    [pod('anywhere'), 'host', 'tcp/80', true, 'all'],
    [pod('anywhere'), 'host', 'udp/53', false, 'a deny inside all'],
    [NEAR, pod('public'), 'tcp/80', true, 'fromEntities world'],
    [pod('web'), pod('public'), 'tcp/80', false, 'pods are not the world'],
    ['host', pod('public'), 'icmp', true, 'allow-localhost'],
    [pod('cidrout'), NEAR, 'tcp/80', true, 'toCIDRSet'],
    [pod('cidrout'), FAR, 'tcp/80', false, 'toCIDRSet except'],
    [pod('cidrout'), pod('web'), 'tcp/80', false, 'CIDR rules do not select pods'],
    [FAR, pod('cidrin'), 'tcp/80', true, 'fromCIDR'],
    [FAR, pod('cidrin'), 'udp/53', false, 'fromCIDR on TCP 80 only'],
    [NEAR, pod('cidrin'), 'tcp/80', false, 'another outside address'],
  ];
  const wrong = expect
    .map(([src, dst, probe, want, why]) => ({ row: rowOf(table, src, dst, probe), want, why }))
    .filter(({ row, want }) => reachable(row.outcome) !== want || (row.trace === 'allow') !== want)
    .map(({ row, want, why }) => `${row.src} -> ${row.dst} ${row.probe} (${why}): expected ${want ? 'ALLOW' : 'DENY'}, trace ${row.trace}, packets ${row.outcome}`);
  assert.deepEqual(wrong, []);
});
