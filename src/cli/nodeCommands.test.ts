// `tendril node …` as a process against the APIs of two real agents (fake
// datapath) on one real etcd: the table, -o json, `node get`, a node the
// registry does not hold; `tendril policy get` and `tendril status` with the
// cluster's numbers. The table's formatting is checked on its own too.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { startEtcd, type EtcdHarness } from '../../test/support/etcdHarness.js';
import { buildServer, listenOnSocket } from '../api/server/server.js';
import { type FakeNodeAgent, startFakeNodeAgent } from '../agent/testing/fakeNodeAgent.js';
import type { ResponseBody } from '../api/types.js';
import { age, nodeTable } from './nodeCommands.js';
import { runCli } from './testing/cliProcess.js';

type NodeRow = ResponseBody<'getNode', 200>;

const A = 'tdl-nodecli-a';
const B = 'tdl-nodecli-b';

describe('formatting (no agent needed)', () => {
  const now = Date.parse('2026-01-02T00:00:00Z');
  test('ages as kubectl prints them', () => {
    assert.equal(age('2026-01-01T23:59:18Z', now), '42s');
    assert.equal(age('2026-01-01T23:53:00Z', now), '7m');
    assert.equal(age('2026-01-01T19:00:00Z', now), '5h');
    assert.equal(age('2025-12-30T00:00:00Z', now), '3d');
    assert.equal(age('not a time', now), '-');
  });

  test('the table: addresses, CIDRs cut after three, mode with the tunnel, health with its reason, routes or local', () => {
    const rows: NodeRow[] = [
      {
        name: 'n1',
        addresses: [
          { type: 'InternalIP', ip: '192.0.2.1' },
          { type: 'RouterIP', ip: '10.0.1.1' },
        ],
        podCidrs: ['10.0.1.0/26', '10.0.1.64/26', '10.0.1.128/26', '10.0.1.192/26'],
        routingMode: 'tunnel',
        tunnel: { protocol: 'vxlan', port: 8472 },
        health: { status: 'ok' },
        startedAt: '2026-01-01T23:59:00Z',
        local: true,
        revision: 5,
      },
      {
        name: 'n2',
        addresses: [{ type: 'InternalIP', ip: '192.0.2.2' }],
        podCidrs: [],
        routingMode: 'native',
        health: { status: 'degraded', reason: 'kvstore etcd disconnected' },
        startedAt: '2026-01-01T20:00:00Z',
        local: false,
        revision: 7,
        routesInstalled: false,
      },
    ];
    const lines = nodeTable(rows, now).trimEnd().split('\n');
    assert.match(lines[0]!, /^NAME\s+ADDRESSES\s+POD CIDRS\s+MODE\s+HEALTH\s+ROUTES\/LOCAL\s+AGE$/);
    assert.match(lines[1]!, /^n1\s+192\.0\.2\.1, router 10\.0\.1\.1\s+10\.0\.1\.0\/26, 10\.0\.1\.64\/26, 10\.0\.1\.128\/26 \(\+1 more\)\s+tunnel \(vxlan:8472\)\s+ok\s+local\s+60s$/);
    assert.match(lines[2]!, /^n2\s+192\.0\.2\.2\s+-\s+native\s+degraded: kvstore etcd disconnected\s+pending\s+4h$/);
  });
});

describe('tendril node against two agents on one etcd', () => {
  let etcd: EtcdHarness;
  let dir: string;
  const apps: FastifyInstance[] = [];
  const nodes: FakeNodeAgent[] = [];
  let sock: string;

  before(async () => {
    etcd = await startEtcd();
    dir = await mkdtemp(join(tmpdir(), 'tdl-nodecli-'));
    for (const [name, cidr, ip] of [
      [A, '10.98.1.0/24', '192.0.2.21'],
      [B, '10.98.2.0/24', '192.0.2.22'],
    ] as const) {
      nodes.push(await startFakeNodeAgent({ nodeName: name, podCidr: cidr, kvstore: { etcdEndpoint: etcd.endpoint }, underlay: { device: 'eth0', ifindex: 2, mtu: 1500, ip } }));
    }
    const app = buildServer(nodes[0]!.agent.api(), { validateResponses: true });
    apps.push(app);
    sock = join(dir, 'a.sock');
    await listenOnSocket(app, sock);
    // A has B's routes in once the list says so.
    const end = Date.now() + 10_000;
    while (!nodes[0]!.agent.api().nodes!.routesInstalled(B)) {
      if (Date.now() > end) throw new Error('A never installed B\'s routes');
      await sleep(20);
    }
  });

  after(async () => {
    for (const app of apps) await app.close().catch(() => undefined);
    for (const n of nodes) await n.stop().catch(() => undefined);
    await etcd?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('node list: this node first, then B with its routes installed', async () => {
    const r = await runCli(['node', 'list', '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trimEnd().split('\n');
    assert.equal(lines.length, 3, r.stdout);
    assert.match(lines[1]!, new RegExp(`^${A}\\s+192\\.0\\.2\\.21, router 10\\.98\\.1\\.1\\s+10\\.98\\.1\\.0/24\\s+tunnel \\(vxlan:8472\\)\\s+ok\\s+local\\s+\\d+s$`));
    assert.match(lines[2]!, new RegExp(`^${B}\\s+192\\.0\\.2\\.22, router 10\\.98\\.2\\.1\\s+10\\.98\\.2\\.0/24\\s+tunnel \\(vxlan:8472\\)\\s+ok\\s+installed\\s+\\d+s$`));

    const json = await runCli(['node', 'list', '-o', 'json', '--socket', sock]);
    assert.equal(json.code, 0, json.stderr);
    const parsed = JSON.parse(json.stdout) as NodeRow[];
    assert.deepEqual(
      parsed.map((n) => [n.name, n.local, n.routesInstalled]),
      [
        [A, true, undefined],
        [B, false, true],
      ],
    );
  });

  test('node get: one node, a field a line; -o json; a node nobody published is exit code 1 with the agent\'s message', async () => {
    const r = await runCli(['node', 'get', B, '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^Name\\s+${B}$`, 'm'));
    assert.match(r.stdout, /^InternalIP\s+192\.0\.2\.22$/m);
    assert.match(r.stdout, /^RouterIP\s+10\.98\.2\.1$/m);
    assert.match(r.stdout, /^Pod CIDRs\s+10\.98\.2\.0\/24$/m);
    assert.match(r.stdout, /^Routes\s+installed$/m);
    const json = await runCli(['node', 'get', A, '-o', 'json', '--socket', sock]);
    assert.equal((JSON.parse(json.stdout) as NodeRow).local, true);

    const missing = await runCli(['node', 'get', 'tdl-nodecli-nobody', '--socket', sock]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /agent: NOT_FOUND: node tdl-nodecli-nobody not found in the node registry/);
    const nowhere = await runCli(['node', 'list', '--socket', '/nonexistent/tdl.sock']);
    assert.equal(nowhere.code, 1);
    assert.match(nowhere.stderr, /cannot reach the tendril agent|is tendril-agent running/);
  });

  test('policy get prints the cluster revision; status shows the node count and routing mode', async () => {
    await nodes[1]!.agent.api().policy.import(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: tdl-nodecli, namespace: prod }
spec: { podSelector: {}, ingress: [] }
`);
    const revB = nodes[1]!.agent.api().policy.clusterRevision!;
    const end = Date.now() + 10_000;
    while (nodes[0]!.agent.api().policy.clusterRevision !== revB) {
      if (Date.now() > end) throw new Error('A never caught up with B\'s policy');
      await sleep(20);
    }
    const json = await runCli(['policy', 'get', '--socket', sock, '-o', 'json']);
    assert.equal((JSON.parse(json.stdout) as { clusterRevision: number }).clusterRevision, revB);
    const r = await runCli(['policy', 'get', '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^Cluster revision: ${revB} \\(node revision \\d+\\)$`, 'm'));

    const s = await runCli(['status', '--socket', sock]);
    assert.equal(s.code, 0, s.stderr);
    assert.match(s.stdout, /^Nodes\s+2 in the cluster, routing mode tunnel$/m);
  });
});
