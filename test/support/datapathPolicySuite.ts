// Kubernetes NetworkPolicy on real packets: 3 namespaces × 3 pods, the node
// and an outside host. For every ordered pair and every probe (TCP and UDP on
// the policies' ports, ICMP echo or ICMPv6 echo) what the packets do must
// equal what `tendril policy trace` says for the same flow. One suite for
// every address family (family.ts): the wrappers test/e2e/datapathPolicy*.test.ts
// run it on IPv4, IPv6 and dual-stack pods, with the same expected verdicts
// on each IP version (on dual-stack, every flow runs on both).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { importPolicyAndWait } from './datapathNode.js';
import { bpfIpcache } from './datapathObserve.js';
import { type Scene, startScene } from './datapathScene.js';
import { cidrIn, cidrLabelOf, type Family, familyName, hostCidr, versionsOf } from './family.js';
import { NetnsPool } from './netns.js';
import { type L4Probe, flowsBehindMismatches, mismatches, type Peer, rowOf, truthTable, type TruthRow, versionNote } from './policyTruthTable.js';
import { reachable } from './reachability.js';
import { requireRoot } from './root.js';
import { networkPolicy } from './policyDocuments.js';

/** IPv4 templates (family.ts mirrors them on IPv6). */
const POD_CIDR = '10.252.0.0/24';
/** Inside the ipBlock below, and inside its `except`. */
const OUTSIDE_IN = '10.199.0.10';
const OUTSIDE_EXCEPT = '10.199.0.200';

const OUT_IN = `outside:${OUTSIDE_IN}`;
const OUT_EX = `outside:${OUTSIDE_EXCEPT}`;

const TCP_PORTS = [53, 80, 5432, 7999, 8000, 8100, 8101];
const UDP_PORTS = [53, 5353];
const PROBES: L4Probe[] = [...TCP_PORTS.map((port) => ({ proto: 'tcp' as const, port })), ...UDP_PORTS.map((port) => ({ proto: 'udp' as const, port })), { proto: 'icmp' }];

const NAMESPACES = [
  { name: 'tdl-a', team: 'a' },
  { name: 'tdl-b', team: 'b' },
  { name: 'tdl-c', team: 'c' },
];
const APPS = [
  { app: 'web', role: 'frontend' },
  { app: 'api', role: 'backend' },
  { app: 'db', role: 'backend' },
];

const NP = networkPolicy;

/** The ipBlock below and its except, as IPv4 templates. */
const BLOCK = '10.199.0.0/24';
const BLOCK_EXCEPT = '10.199.0.128/25';

/** One ipBlock peer per IP version of the family: `{ipBlock: {cidr: 10.199.0.0/24, except: [10.199.0.128/25]}}` on IPv4. */
const ipBlockPeers = (family: Family) => versionsOf(family).map((v) => `{ipBlock: {cidr: ${cidrIn(v, BLOCK)}, except: [${cidrIn(v, BLOCK_EXCEPT)}]}}`).join(', ');

const policies = (family: Family) => [
  // tdl-c: default deny, both directions, every pod.
  NP('tdl-c', 'default-deny', 'podSelector: {}\npolicyTypes: [Ingress, Egress]'),
  // tdl-c: DNS to anyone, the node included (ports without peers).
  NP('tdl-c', 'dns-out', 'podSelector: {}\npolicyTypes: [Egress]\negress:\n- ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]'),
  // tdl-c/db: namespaceSelector AND podSelector in one peer.
  NP(
    'tdl-c',
    'db-from-b-api',
    'podSelector: {matchLabels: {app: db}}\npolicyTypes: [Ingress]\ningress:\n- from: [{namespaceSelector: {matchLabels: {team: b}}, podSelector: {matchLabels: {app: api}}}]\n  ports: [{protocol: TCP, port: 5432}]',
  ),
  // tdl-c/web: an ipBlock with except, every protocol (ICMP included).
  NP('tdl-c', 'web-from-outside', `podSelector: {matchLabels: {app: web}}\npolicyTypes: [Ingress]\ningress:\n- from: [${ipBlockPeers(family)}]`),
  // tdl-b/api: podSelector of its own namespace, a port range (endPort) and a UDP port.
  NP(
    'tdl-b',
    'api-from-web',
    'podSelector: {matchLabels: {app: api}}\npolicyTypes: [Ingress]\ningress:\n- from: [{podSelector: {matchLabels: {app: web}}}]\n  ports: [{protocol: TCP, port: 8000, endPort: 8100}, {protocol: UDP, port: 5353}]',
  ),
  // tdl-b/db: namespaceSelector alone.
  NP('tdl-b', 'db-from-team-a', 'podSelector: {matchLabels: {app: db}}\npolicyTypes: [Ingress]\ningress:\n- from: [{namespaceSelector: {matchLabels: {team: a}}}]\n  ports: [{protocol: TCP, port: 5432}]'),
  // tdl-a/api: matchExpressions on a second label.
  NP('tdl-a', 'api-from-frontends', 'podSelector: {matchLabels: {app: api}}\npolicyTypes: [Ingress]\ningress:\n- from: [{podSelector: {matchExpressions: [{key: role, operator: In, values: [frontend]}]}}]\n  ports: [{protocol: TCP, port: 80}]'),
  // tdl-a/db: egress to pods of every namespace only: not the node, not the outside.
  NP('tdl-a', 'db-pods-only', 'podSelector: {matchLabels: {app: db}}\npolicyTypes: [Egress]\negress:\n- to: [{namespaceSelector: {}}]'),
].join('');

/** The suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function datapathPolicySuite(family: Family, tag: string): void {
  requireRoot('the datapath NetworkPolicy truth table');
  const versions = versionsOf(family);
  const pool = new NetnsPool(tag);
  let scene: Scene | undefined;
  const peersOf = (name: string): Peer[] =>
    versions.map((v) => {
      const p = scene!.peersIn(v).get(name);
      if (!p) throw new Error(`no peer ${name} on IPv${v}`);
      return p;
    });

  before(async () => {
    scene = await startScene(pool, {
      nodeName: `tdl-node-np-${familyName(family)}`,
      family,
      podCidr: POD_CIDR,
      pods: NAMESPACES.flatMap((ns) => APPS.map((a) => ({ name: a.app, namespace: ns.name, labels: { app: a.app, role: a.role }, namespaceLabels: { team: ns.team } }))),
      tcpPorts: TCP_PORTS,
      udpPorts: UDP_PORTS,
      // What the ipcache gives these sources: the CIDR identity of the longest policy prefix holding them (mirrored on IPv6).
      outside: [
        { address: OUTSIDE_IN, labels: ['cidr:10.199.0.0/24', 'reserved:world'] },
        { address: OUTSIDE_EXCEPT, labels: ['cidr:10.199.0.128/25', 'reserved:world'] },
      ],
    });
  });

  after(async () => {
    if (scene) await scene.cleanup();
    else await pool.cleanup();
  });

  let table: TruthRow[] = [];

  test('NetworkPolicies imported: every selected endpoint realizes them in the datapath', async () => {
    const r = await importPolicyAndWait(scene!.node, policies(family));
    assert.equal(r.policies.length, 8);
    const ipcache = await scene!.node.agent.client.listIpcache();
    const prefixes = versions.flatMap((v) => [cidrIn(v, BLOCK), cidrIn(v, BLOCK_EXCEPT)]);
    for (const prefix of prefixes) {
      const e = ipcache.find((x) => x.prefix === prefix);
      assert.ok(e, `the ipcache holds the ipBlock prefix ${prefix}`);
      const id = await scene!.node.agent.client.getIdentity(e.identity);
      assert.ok(id.labels.includes(cidrLabelOf(prefix)), `${prefix} has its CIDR identity: ${JSON.stringify(id.labels)}`);
    }
    // What the programs see: the CIDR identities, and the node's router address as the host identity.
    const inMap = await bpfIpcache(scene!.node);
    for (const prefix of prefixes) {
      assert.equal(inMap.find((x) => x.prefix === prefix)?.identity, ipcache.find((x) => x.prefix === prefix)?.identity, `tendril_ipcache holds ${prefix} with its identity`);
    }
    for (const host of peersOf('host')) {
      assert.equal(inMap.find((x) => x.prefix === hostCidr(host.address))?.identity, 1, `tendril_ipcache: the router address ${host.address} is the host identity`);
    }
  });

  test('every pair × probe: observed reachability equals policy trace', async (t) => {
    const pairs: Array<[Peer, Peer]> = [];
    for (const v of versions) {
      const peers = scene!.peersIn(v);
      const podPeers = [...peers.values()].filter((p) => p.name.includes('/'));
      const [host, outIn, outEx] = ['host', OUT_IN, OUT_EX].map((n) => peers.get(n)!);
      for (const src of podPeers) {
        for (const dst of podPeers) if (src !== dst) pairs.push([src, dst]);
        pairs.push([src, host!], [host!, src], [src, outIn!], [src, outEx!], [outIn!, src], [outEx!, src]);
      }
    }
    const started = Date.now();
    table = await truthTable(scene!.node, pairs, PROBES, { timeoutMs: 400, probeConcurrency: 96 });
    const bad = mismatches(table);
    t.diagnostic(`${familyName(family)}: ${table.length} flows (${table.filter((r) => r.trace === 'allow').length} allowed, ${table.filter((r) => r.trace === 'deny').length} denied) in ${Date.now() - started} ms; ${table.filter((r) => r.retried).length} allowed ones probed again after a first timeout`);
    assert.deepEqual(bad, [], `${bad.length} of ${table.length} flows differ from the trace (${Date.now() - started} ms)\n${bad.length > 0 ? await flowsBehindMismatches(scene!.node, table) : ''}`);
    // Not trivially equal: both verdicts occur for every protocol, on every IP version.
    for (const v of versions) {
      for (const proto of ['tcp', 'udp', 'icmp']) {
        const rows = table.filter((r) => r.version === v && r.probe.startsWith(proto));
        assert.ok(rows.some((r) => r.trace === 'allow') && rows.some((r) => r.trace === 'deny'), `${proto}${versionNote({ version: v })}: both verdicts occur`);
      }
    }
  });

  test('hand-checked rows of the table (the trace itself is not trusted blindly)', () => {
    assert.ok(table.length > 0, 'the truth table ran');
    const expect: Array<[string, string, string, boolean]> = [
      ['tdl-a/web', 'tdl-b/db', 'tcp/5432', true], // namespaceSelector team=a
      ['tdl-c/web', 'tdl-b/db', 'tcp/5432', false], // tdl-c egress: DNS only
      ['tdl-a/api', 'tdl-b/db', 'tcp/80', false], // port not in the rule
      ['tdl-b/api', 'tdl-c/db', 'tcp/5432', true], // team=b AND app=api
      ['tdl-b/web', 'tdl-c/db', 'tcp/5432', false], // team=b but not api
      ['tdl-a/api', 'tdl-c/db', 'tcp/5432', false], // api but not team=b
      ['tdl-b/web', 'tdl-b/api', 'tcp/8000', true], // range start
      ['tdl-b/web', 'tdl-b/api', 'tcp/8100', true], // range end
      ['tdl-b/web', 'tdl-b/api', 'tcp/7999', false],
      ['tdl-b/web', 'tdl-b/api', 'tcp/8101', false],
      ['tdl-b/web', 'tdl-b/api', 'udp/5353', true],
      ['tdl-b/web', 'tdl-b/api', 'udp/53', false],
      ['tdl-a/web', 'tdl-b/api', 'tcp/8000', false], // podSelector stays in its namespace
      ['tdl-a/web', 'tdl-a/api', 'tcp/80', true], // role In [frontend]
      ['tdl-a/db', 'tdl-a/api', 'tcp/80', false],
      [OUT_IN, 'tdl-c/web', 'icmp', true], // ipBlock (ICMPv6 echo on IPv6)
      [OUT_EX, 'tdl-c/web', 'icmp', false], // its except
      [OUT_IN, 'tdl-c/api', 'tcp/80', false],
      [OUT_IN, 'tdl-a/web', 'tcp/80', true], // not selected: open
      ['tdl-c/api', 'host', 'udp/53', true], // egress to the node on DNS
      ['tdl-c/api', 'host', 'tcp/53', true],
      ['tdl-c/api', 'host', 'tcp/80', false],
      ['tdl-c/api', 'host', 'icmp', false],
      ['tdl-c/api', OUT_IN, 'udp/53', true], // DNS to anyone, outside too
      ['tdl-a/db', 'host', 'icmp', false], // pods only
      ['tdl-a/db', OUT_IN, 'tcp/80', false],
      ['tdl-a/db', 'tdl-c/web', 'tcp/80', false], // db may send, tdl-c/web does not take it
      ['tdl-a/db', 'tdl-b/web', 'tcp/80', true],
      ['host', 'tdl-c/api', 'tcp/80', true], // allow-localhost
      ['tdl-c/api', 'tdl-c/db', 'icmp', false], // default deny both ways
    ];
    const wrong = versions
      .flatMap((v) => expect.map(([src, dst, probe, want]) => ({ row: rowOf(table, src, dst, probe, v), want })))
      .filter(({ row, want }) => reachable(row.outcome) !== want || (row.trace === 'allow') !== want)
      .map(({ row, want }) => `${row.src} -> ${row.dst} ${row.probe}${versionNote(row)}: expected ${want ? 'ALLOW' : 'DENY'}, trace ${row.trace}, packets ${row.outcome}`);
    assert.deepEqual(wrong, []);
  });

  test('`tendril policy trace` on the CLI agrees with the API and the packets', async () => {
    const cases: Array<[string, string, string]> = [
      ['tdl-b/api', 'tdl-c/db', '5432/tcp'],
      ['tdl-b/web', 'tdl-c/db', '5432/tcp'],
    ];
    for (const [src, dst, dport] of cases) {
      const [s, d] = [peersOf(src)[0]!, peersOf(dst)[0]!];
      const r = await scene!.node.cli(['policy', 'trace', '--src', s.labels.join(','), '--dst', d.labels.join(','), '--dport', dport]);
      const row = rowOf(table, src, dst, `tcp/${dport.split('/')[0]}`, s.version);
      assert.equal(r.code, row.trace === 'allow' ? 0 : 1, r.stdout + r.stderr);
      assert.match(r.stdout, new RegExp(`Final verdict: ${row.trace === 'allow' ? 'ALLOW' : 'DENY'}`));
    }
  });
}
