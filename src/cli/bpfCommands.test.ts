// `tendril monitor` and `tendril bpf …` as processes against an agent API
// serving real maps pinned in a bpffs directory of the test's own: argument
// checks, table text and -o json, the monitor stream until SIGINT, and the
// answer without the eBPF datapath.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { requireRoot } from '../../test/support/root.js';
import type { BpfObservability } from '../agent/bpfObservability.js';
import { type BpfApiServer, startBpfApiServer } from '../agent/testing/bpfApiServer.js';
import type { FakeNodeAgent } from '../agent/testing/fakeNodeAgent.js';
import { DropReason, EventType, TrafficDirection } from '../datapath/bpf/constants.js';
import { datapathEvent } from '../datapath/bpf/layout.js';
import { ruleCookie } from '../datapath/bpf/ruleCookie.js';
import type { TestDatapathMaps } from '../datapath/bpf/testing/inspectMaps.js';
import { encode } from '../datapath/kernel/bpf/codec.js';
import type { MonitorEvent } from '../monitor/index.js';
import { parseIp } from '../netip/index.js';
import { CLI_MAIN, runCli } from './testing/cliProcess.js';
import { monitorLine, monitorQuery } from './monitorCommand.js';
import { CliError } from './cliError.js';

requireRoot('the bpf CLI tests');

const tendril = runCli;

async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

let server: BpfApiServer;
let maps: TestDatapathMaps;
let node: FakeNodeAgent;
let obs: BpfObservability;
let sock: string;
const COOKIE = ruleCookie({ policy: 'NetworkPolicy/default/db-from-web', rule: 0, path: 'spec.ingress[0]' });

before(async () => {
  server = await startBpfApiServer({ nodeName: 'tdl-bpfcli', podCidr: '10.92.0.0/24' });
  ({ maps, node } = server);
  obs = server.observability;
  sock = server.socket;
  maps.policy.set({ endpointId: 5, identity: 2, egress: false, proto: 6, port: 5432, portPrefixLen: 16 }, { cookie: COOKIE, deny: 0, l4PrefixBits: 24 });
  maps.policy.set({ endpointId: 5, identity: 0, egress: true, proto: 17, port: 8000, portPrefixLen: 12 }, { cookie: 0, deny: 1, l4PrefixBits: 20 });
  const now = process.hrtime.bigint();
  maps.ctTcp.set(
    { saddr: parseIp('10.92.0.5'), daddr: parseIp('10.92.0.6'), sport: 40000, dport: 5432, proto: 6, flags: 0 },
    { expiresNs: now + 3_600_000_000_000n, packets: 4n, bytes: 300n, srcIdentity: 2, dstIdentity: 3, srcEndpoint: 5, dstEndpoint: 6, revNatIndex: 0, tcpFlags: 0x12, flags: 1, backendId: 0, natAddr: parseIp('0.0.0.0'), natPort: 0 },
  );
});

after(() => server?.stop());

describe('argument checks (no agent needed)', () => {
  test('monitor: types, endpoint and identity are checked; repeated types kept once', () => {
    assert.deepEqual(monitorQuery({ type: ['drop', 'trace', 'drop'], endpoint: '12', identity: '4294967295' }), { type: ['drop', 'trace'], endpoint: 12, identity: 4294967295 });
    assert.deepEqual(monitorQuery({}), {});
    assert.throws(() => monitorQuery({ type: ['drops'] }), (e: unknown) => e instanceof CliError && /--type must be one of drop, policy-verdict, trace/.test(e.message));
    assert.throws(() => monitorQuery({ endpoint: '65536' }), /--endpoint must be a number from 0 to 65535/);
    assert.throws(() => monitorQuery({ identity: '-1' }), /--identity must be a number/);
    assert.throws(() => monitorQuery({ output: 'yaml' }), /unknown output format "yaml"/);
  });

  test('the CLI refuses bad arguments with exit code 1 before calling the agent', async () => {
    const bad = await tendril(['monitor', '--type', 'nope', '--socket', '/nonexistent/x.sock']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /--type must be one of/);
    const ep = await tendril(['bpf', 'policy', 'get', 'web', '--socket', '/nonexistent/x.sock']);
    assert.equal(ep.code, 1);
    assert.match(ep.stderr, /endpoint must be an endpoint number/);
    const ct = await tendril(['bpf', 'ct', 'list', '--endpoint', 'x', '--socket', '/nonexistent/x.sock']);
    assert.equal(ct.code, 1);
    assert.match(ct.stderr, /--endpoint must be an endpoint number/);
  });

  test('a monitor line is the text line, or the event as one JSON line', () => {
    const e = { type: 'trace', time: '2026-01-01T12:00:00.000Z', tracePoint: 'to-stack', direction: 'none', source: { identity: 1, labels: [], ip: '10.0.0.1', port: 1 }, destination: { identity: 2, labels: [], ip: '10.0.0.2', port: 2 }, protocol: 'udp', interface: { ifindex: 3 }, length: 40 } satisfies MonitorEvent;
    assert.equal(monitorLine(e, 'json'), `${JSON.stringify(e)}\n`);
    assert.equal(monitorLine(e, undefined), '12:00:00.000 TRACE to-stack 10.0.0.1:1 [id 1] -> 10.0.0.2:2 [id 2] udp on ifindex 3, 40 bytes\n');
  });
});

describe('tendril bpf', () => {
  test('policy get: a table with labels, port ranges, action and rule; -o json the same data', async () => {
    const text = await tendril(['bpf', 'policy', 'get', '5', '--socket', sock]);
    assert.equal(text.code, 0, text.stderr);
    const lines = text.stdout.trimEnd().split('\n');
    assert.match(lines[0]!, /^DIRECTION\s+IDENTITY\s+LABELS\s+PORT\/PROTO\s+ACTION\s+RULE$/);
    assert.match(lines[1]!, /^egress\s+ANY\s+\(any peer\)\s+8000-8015\/UDP\s+DENY\s+no rule allows \(default deny\)$/);
    assert.match(lines[2]!, /^ingress\s+2\s+reserved:world\s+5432\/TCP\s+ALLOW\s+NetworkPolicy\/default\/db-from-web spec\.ingress\[0\]$/);
    const json = await tendril(['bpf', 'policy', 'get', '5', '-o', 'json', '--socket', sock]);
    const body = JSON.parse(json.stdout) as { endpointId: number; entries: Array<{ action: string; rule: { text: string } }> };
    assert.equal(body.endpointId, 5);
    assert.deepEqual(body.entries.map((e) => e.action), ['deny', 'allow']);
  });

  test('ct list and metrics: tables by default, arrays with -o json', async () => {
    const ct = await tendril(['bpf', 'ct', 'list', '--endpoint', '6', '--socket', sock]);
    assert.equal(ct.code, 0, ct.stderr);
    assert.match(ct.stdout, /^PROTO\s+SOURCE\s+DESTINATION\s+EXPIRES/);
    assert.match(ct.stdout, /\ntcp\s+10\.92\.0\.5:40000\s+10\.92\.0\.6:5432\s+\d+s\s+4\s+300\s+replied,SA\s+5 -> 6\s+2 -> 3\n/);
    const ctJson = JSON.parse((await tendril(['bpf', 'ct', 'list', '-o', 'json', '--socket', sock])).stdout) as Array<{ sport: number }>;
    assert.deepEqual(ctJson.map((r) => r.sport), [40000]);
    const metrics = JSON.parse((await tendril(['bpf', 'metrics', '-o', 'json', '--socket', sock])).stdout) as unknown[];
    assert.ok(Array.isArray(metrics));
    const eps = await tendril(['bpf', 'endpoint', 'list', '--socket', sock]);
    assert.equal(eps.code, 0, eps.stderr);
    assert.match(eps.stdout, /^IP\s+ENDPOINT\s+IDENTITY/);
    const ipc = await tendril(['bpf', 'ipcache', 'list', '-o', 'json', '--socket', sock]);
    assert.deepEqual(JSON.parse(ipc.stdout), []);
  });

  test('ct gc says what it removed; ct flush how many entries went', async () => {
    maps.ctAny.set(
      { saddr: parseIp('10.92.0.5'), daddr: parseIp('10.92.0.9'), sport: 53, dport: 53, proto: 17, flags: 0 },
      { expiresNs: process.hrtime.bigint() + 60_000_000_000n, packets: 1n, bytes: 60n, srcIdentity: 2, dstIdentity: 3, srcEndpoint: 5, dstEndpoint: 0, revNatIndex: 0, tcpFlags: 0, flags: 0, backendId: 0, natAddr: parseIp('0.0.0.0'), natPort: 0 },
    );
    const gc = await tendril(['bpf', 'ct', 'gc', '--socket', sock]);
    assert.equal(gc.code, 0, gc.stderr);
    assert.match(gc.stdout, /^Removed 0 of 1 TCP and 0 of 1 other entries in [\d.]+ ms\n$/);
    const r = await tendril(['bpf', 'ct', 'flush', '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'Deleted 1 TCP and 1 other conntrack entries\n');
  });
});

describe('tendril monitor', () => {
  function start(args: string[]): { child: ChildProcess; out: () => string; err: () => string } {
    const child = spawn(process.execPath, [CLI_MAIN, 'monitor', ...args, '--socket', sock], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
    return { child, out: () => out, err: () => err };
  }
  const record = (dstEndpoint: number) =>
    encode(datapathEvent, {
      type: EventType.DROP,
      subtype: Math.abs(DropReason.POLICY.code),
      direction: TrafficDirection.INGRESS,
      proto: 6,
      tcpFlags: 2,
      service: 0,
      ifindex: 1,
      srcIdentity: 2,
      dstIdentity: 3,
      srcEndpoint: 0,
      dstEndpoint,
      cookie: 0,
      origLen: 60,
      sport: 33000,
      dport: 80,
      saddr: parseIp('192.0.2.1'),
      daddr: parseIp('10.92.0.6'),
      tsNs: process.hrtime.bigint(),
    });

  test('-o json: one JSON event per line, filtered; SIGINT ends it with exit code 0', async () => {
    const m = start(['-o', 'json', '--endpoint', '6', '--type', 'drop']);
    try {
      await until(() => obs.monitor.stats().subscribers === 1, `the monitor to subscribe (stderr: ${m.err()})`);
      obs.monitor.handleRecords([record(7), record(6)]);
      await until(() => m.out().includes('\n'), 'a line');
      const lines = m.out().trimEnd().split('\n');
      assert.equal(lines.length, 1);
      const e = JSON.parse(lines[0]!) as MonitorEvent;
      assert.equal(e.destination.endpoint, 6);
      assert.equal(e.rule?.text, 'no rule allows (default deny)');
    } finally {
      const exited = new Promise<number | null>((r) => m.child.once('exit', (code) => r(code)));
      m.child.kill('SIGINT');
      assert.equal(await exited, 0, m.err());
    }
    await until(() => obs.monitor.stats().subscribers === 0, 'the client to leave');
  });

  test('text lines by default', async () => {
    const m = start([]);
    try {
      await until(() => obs.monitor.stats().subscribers === 1, `the monitor to subscribe (stderr: ${m.err()})`);
      obs.monitor.handleRecords([record(6)]);
      await until(() => m.out().includes('\n'), 'a line');
      assert.match(m.out(), /^\d\d:\d\d:\d\d\.\d{3} DROP \(POLICY: policy denied: no rule allows this flow\) ingress 192\.0\.2\.1:33000 \[id 2 reserved:world\] -> 10\.92\.0\.6:80 \[ep 6 id 3 .*\] tcp SYN on lo, 60 bytes; rule: no rule allows \(default deny\)\n$/);
    } finally {
      const exited = new Promise((r) => m.child.once('exit', r));
      m.child.kill('SIGINT');
      await exited;
    }
  });

  test('without the eBPF datapath: exit code 1 and the agent\'s reason', async () => {
    const r = await tendril(['monitor', '--socket', node.config.socket]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /agent: CONFLICT: the eBPF datapath is not running on this node/);
    const b = await tendril(['bpf', 'metrics', '--socket', node.config.socket]);
    assert.equal(b.code, 1);
    assert.match(b.stderr, /eBPF datapath is not running/);
  });
});
