// tendril policies on real packets: deny beats allow (also a wider deny over a
// narrower wildcard allow), the entities host, world, cluster and all, and
// CIDR rules with except. Every flow is checked by hand and against
// `tendril policy trace`. One suite for every address family (family.ts):
// the wrappers test/e2e/datapathTendrilPolicy*.test.ts run it on IPv4, IPv6
// and dual-stack pods with the same expected verdicts on each IP version.
// The CIDR rules are written in each IP version the family has, except one:
// `v4world` may reach 0.0.0.0/0 only, which must admit no IPv6 peer (Cilium
// once let 0.0.0.0/0 allow IPv6).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { importPolicyAndWait } from './datapathNode.js';
import { type Scene, startScene } from './datapathScene.js';
import { allOf, cidrIn, type Family, familyName, hostCidr, type IpFamily, versionsOf } from './family.js';
import { NetnsPool } from './netns.js';
import { flowsBehindMismatches, type L4Probe, mismatches, type Peer, rowOf, truthTable, type TruthRow, versionNote } from './policyTruthTable.js';
import { reachable } from './reachability.js';
import { requireRoot } from './root.js';
import { tendrilPolicy } from './policyDocuments.js';

const NS = 'tdl-t';
/** IPv4 templates (family.ts mirrors them on IPv6). */
const POD_CIDR = '10.253.0.0/24';
const OUT_NEAR = '10.199.0.10';
const OUT_FAR = '10.199.0.200';
/** An outside address no policy prefix but a /0 holds (another /24 of the outside host). */
const OUT_BARE = '10.198.0.7';

const TCP_PORTS = [22, 80, 9090, 9500];
const UDP_PORTS = [53];
const PROBES: L4Probe[] = [...TCP_PORTS.map((port) => ({ proto: 'tcp' as const, port })), ...UDP_PORTS.map((port) => ({ proto: 'udp' as const, port })), { proto: 'icmp' }];

const TNP = (name: string, spec: string): string => tendrilPolicy(NS, name, spec);

/** A CIDR list in every IP version of the family: `[10.199.0.200/32]` on IPv4. */
const cidrs = (versions: readonly IpFamily[], v4: string) => `[${versions.map((v) => cidrIn(v, v4)).join(', ')}]`;
/** A toCIDRSet with except in every IP version of the family. */
const cidrSets = (versions: readonly IpFamily[], v4: string, except: string) => `[${versions.map((v) => `{cidr: ${cidrIn(v, v4)}, except: [${cidrIn(v, except)}]}`).join(', ')}]`;

const policies = (versions: readonly IpFamily[]) => [
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
  TNP('cidrout', `endpointSelector: {matchLabels: {app: cidrout}}\negress:\n- toCIDRSet: ${cidrSets(versions, '10.199.0.0/24', '10.199.0.128/25')}`),
  // cidrin: ingress from one outside address only, on TCP 80.
  TNP('cidrin', `endpointSelector: {matchLabels: {app: cidrin}}\ningress:\n- fromCIDR: ${cidrs(versions, `${OUT_FAR}/32`)}\n  toPorts: [{ports: [{port: "80", protocol: TCP}]}]`),
  // v4world: egress to the IPv4 /0 only, on every family: it never admits an IPv6 peer.
  TNP('v4world', `endpointSelector: {matchLabels: {app: v4world}}\negress:\n- toCIDR: [${allOf(4)}]`),
].join('');

const APPS = ['web', 'db', 'client', 'gate', 'incluster', 'outbound', 'anywhere', 'public', 'cidrout', 'cidrin'];
/** Pods probed towards the outside and the node only (the /0 rows): they add no pod × pod flows. */
const EDGE_APPS = ['v4world'];

const pod = (app: string) => `${NS}/${app}`;
const NEAR = `outside:${OUT_NEAR}`;
const FAR = `outside:${OUT_FAR}`;
const BARE = `outside:${OUT_BARE}`;

/** The suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function datapathTendrilPolicySuite(family: Family, tag: string): void {
  requireRoot('the datapath tendril policy test');
  const versions = versionsOf(family);
  const pool = new NetnsPool(tag);
  let scene: Scene | undefined;
  let table: TruthRow[] = [];

  before(async () => {
    scene = await startScene(pool, {
      nodeName: `tdl-node-tp-${familyName(family)}`,
      family,
      podCidr: POD_CIDR,
      pods: [...APPS, ...EDGE_APPS].map((app) => ({ name: app, namespace: NS, labels: { app } })),
      tcpPorts: TCP_PORTS,
      udpPorts: UDP_PORTS,
      // CIDR identities of the policies' prefixes: 10.199.0.0/24, 10.199.0.128/25, 10.199.0.200/32 and 0.0.0.0/0 (their mirrors on IPv6, but no ::/0).
      outside: [
        { address: OUT_NEAR, labels: ['cidr:10.199.0.0/24', 'reserved:world'] },
        { address: OUT_FAR, labels: ['cidr:10.199.0.200/32', 'reserved:world'] },
        // No IPv6 policy prefix holds its mirror: on IPv6 it is the world itself, IPv6's own (world-ipv6).
        { address: OUT_BARE, labels: ['cidr:0.0.0.0/0', 'reserved:world'], labels6: ['reserved:world-ipv6'] },
      ],
    });
    await importPolicyAndWait(scene.node, policies(versions));
  });

  after(async () => {
    if (scene) await scene.cleanup();
    else await pool.cleanup();
  });

  test('the ipcache holds each IP version\'s policy prefixes, the router addresses as the host, and no ::/0', async () => {
    const ipcache = await scene!.node.agent.client.listIpcache();
    for (const v of versions) {
      for (const prefix of ['10.199.0.0/24', '10.199.0.128/25', `${OUT_FAR}/32`].map((c) => cidrIn(v, c))) assert.ok(ipcache.some((e) => e.prefix === prefix), `the ipcache holds ${prefix}`);
      const host = scene!.peersIn(v).get('host')!;
      assert.equal(ipcache.find((e) => e.prefix === hostCidr(host.address))?.identity, 1, `the router address ${host.address} is the host identity`);
    }
    assert.ok(ipcache.some((e) => e.prefix === allOf(4)), 'the ipcache holds 0.0.0.0/0 (v4world)');
    assert.ok(!ipcache.some((e) => e.prefix === allOf(6)), 'no policy names ::/0');
  });

  /** Every flow between the pods, the node and the outside addresses, by hand where it matters and all against the trace. */
  test('deny beats allow, entities and CIDR rules: packets equal policy trace', async (t) => {
    const pairs: Array<[Peer, Peer]> = [];
    for (const v of versions) {
      const peers = scene!.peersIn(v);
      const pods = APPS.map((a) => peers.get(pod(a))!);
      const [host, near, far, bare] = ['host', NEAR, FAR, BARE].map((n) => peers.get(n)!);
      for (const src of pods) {
        for (const dst of pods) if (src !== dst) pairs.push([src, dst]);
        pairs.push([src, host!], [host!, src], [src, near!], [src, far!], [near!, src], [far!, src]);
      }
      for (const src of EDGE_APPS.map((a) => peers.get(pod(a))!)) pairs.push([src, host!], [src, near!], [src, far!], [src, bare!]);
      pairs.push([peers.get(pod('web'))!, bare!], [peers.get(pod('outbound'))!, bare!], [peers.get(pod('incluster'))!, bare!], [bare!, peers.get(pod('public'))!]);
    }
    const started = Date.now();
    table = await truthTable(scene!.node, pairs, PROBES, { timeoutMs: 400, probeConcurrency: 96 });
    const bad = mismatches(table);
    t.diagnostic(`${familyName(family)}: ${table.length} flows in ${Date.now() - started} ms, ${table.filter((r) => r.retried).length} allowed ones probed again after a first timeout`);
    assert.deepEqual(bad, [], `${bad.length} of ${table.length} flows differ from the trace\n${bad.length > 0 ? await flowsBehindMismatches(scene!.node, table) : ''}`);

    const expect: Expectation[] = [
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
      [pod('web'), BARE, 'tcp/80', true, 'egress not enforced'],
      [pod('outbound'), BARE, 'icmp', true, 'world: an address without a CIDR identity of its own'],
      [pod('incluster'), BARE, 'tcp/80', false, 'cluster is not the world'],
      [BARE, pod('public'), 'tcp/80', true, 'fromEntities world'],
      [pod('v4world'), 'host', 'tcp/80', false, 'a /0 is not the node'],
    ];
    assert.deepEqual(versions.flatMap((v) => wrongRows(table, v, expect)), []);
  });

  // The IPv4 /0 on each IP version: everything outside on IPv4, nothing on IPv6.
  for (const v of versions) {
    test(
      `toCIDR 0.0.0.0/0 ${v === 4 ? 'admits every outside IPv4 peer' : 'admits no IPv6 peer (ICMPv6 echo neither)'}`,
      // An IPv6 address outside the ipcache is world-ipv6 in the datapath, which 0.0.0.0/0 does not select.
      {},
      () => {
        assert.ok(table.length > 0, 'the truth table ran');
        const rows = [NEAR, FAR, BARE].flatMap((dst): Expectation[] => [
          [pod('v4world'), dst, 'tcp/80', v === 4, v === 4 ? '0.0.0.0/0 holds every IPv4 address' : '0.0.0.0/0 admits no IPv6 peer'],
          [pod('v4world'), dst, 'icmp', v === 4, v === 4 ? '0.0.0.0/0: ICMP echo' : '0.0.0.0/0 admits no ICMPv6 echo'],
        ]);
        assert.deepEqual(wrongRows(table, v, rows), []);
      },
    );
  }
}

/** src, dst, probe, whether it passes, why. */
type Expectation = [string, string, string, boolean, string];

/** The hand-written rows the packets or the trace of IP version `v` contradict, as readable lines. */
function wrongRows(table: readonly TruthRow[], v: IpFamily, expect: readonly Expectation[]): string[] {
  return expect
    .map(([src, dst, probe, want, why]) => ({ row: rowOf(table, src, dst, probe, v), want, why }))
    .filter(({ row, want }) => reachable(row.outcome) !== want || (row.trace === 'allow') !== want)
    .map(({ row, want, why }) => `${row.src} -> ${row.dst} ${row.probe}${versionNote(row)} (${why}): expected ${want ? 'ALLOW' : 'DENY'}, trace ${row.trace}, packets ${row.outcome}`);
}
