// What a second new user tripped over, against real agents in fresh
// namespaces: GET /healthz as documented (on the socket and on the
// Prometheus address, for HTTP probes), a start in a namespace whose lo is
// down (the cause and the fix, not a netlink errno), one set of config key
// names (errors and `tendril config`), `bpf policy get` of an endpoint that
// does not exist, and a log a person and a pipeline can read: ISO times and
// a line for each policy, service and endpoint change.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { dbFromWebPolicy } from '../../src/policy/testing/policies.js';
import { CLI_MAIN, runCli } from '../../src/cli/testing/cliProcess.js';
import { confListFromBytes, type CniRuntime } from '../../src/libcni/index.js';
import { AGENT_BIN, type AgentProcess, startSingleNode } from '../support/agentHarness.js';
import { NetnsPool } from '../support/netns.js';
import { requireRoot } from '../support/root.js';
import { run } from '../support/run.js';

requireRoot('the new-user papercuts test');

const pool = new NetnsPool('pc');
const NODE_NAME = 'tdl-node-pc';
/** Loopback of the node's own namespace: nothing else on the machine shares the port. */
const METRICS_ADDR = '127.0.0.1:9962';
let agent: AgentProcess;
let runtime: CniRuntime;
let node = '';
let cleanup = async () => {};
let scratch = '';

/** GET over the agent's unix socket, as `curl --unix-socket` would. */
function getOnSocket(socketPath: string, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method: 'GET', headers: { host: 'tendril' } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The agent's JSON log records so far. */
const records = (): Array<Record<string, unknown>> =>
  agent.output
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

before(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'tdl-pc-'));
  ({ node, agent, runtime, cleanup } = await startSingleNode(pool, { nodeName: NODE_NAME, args: ['--pod-cidr', '10.243.0.0/24', '--prometheus-serve-addr', METRICS_ADDR] }));
});

after(async () => {
  await cleanup();
  await pool.cleanup();
  await rm(scratch, { recursive: true, force: true });
});

describe('GET /healthz, as the docs and probes ask for it', () => {
  test('on the API socket: /healthz answers as /v1/healthz', async () => {
    const plain = await getOnSocket(agent.socket, '/healthz');
    assert.equal(plain.status, 200, plain.body);
    const body = JSON.parse(plain.body) as { status: string; nodeName: string };
    assert.equal(body.status, 'ok');
    assert.equal(body.nodeName, NODE_NAME);
    const versioned = await getOnSocket(agent.socket, '/v1/healthz');
    assert.equal(versioned.status, 200);
    assert.deepEqual(Object.keys(JSON.parse(versioned.body) as object).sort(), Object.keys(body).sort());
    assert.equal((await getOnSocket(agent.socket, '/healthzz')).status, 404, 'only /healthz itself is an alias');
  });

  test('on --prometheus-serve-addr: GET /healthz is 200 {"status":"ok"} for an HTTP probe, beside /metrics', async () => {
    const r = await pool.exec(node, ['curl', '-sS', '-w', '\n%{http_code}', `http://${METRICS_ADDR}/healthz`]);
    assert.equal(r.code, 0, r.stderr);
    const [body, status] = r.stdout.split('\n');
    assert.equal(status, '200', r.stdout);
    assert.deepEqual(JSON.parse(body!), { status: 'ok' });
    const metrics = await pool.exec(node, ['curl', '-sS', '-o', '/dev/null', '-w', '%{http_code}', `http://${METRICS_ADDR}/metrics`]);
    assert.equal(metrics.stdout, '200');
    const other = await pool.exec(node, ['curl', '-sS', '-w', '\n%{http_code}', `http://${METRICS_ADDR}/v1/config`]);
    assert.match(other.stdout, /only GET \/metrics and GET \/healthz are served here\n\n404$/);
  });
});

describe('one set of config key names', () => {
  test('tendril config prints the documented keys (podCidr, leaseTtl, kvstoreOpt), not the field names', async () => {
    const r = await runCli(['config', '--socket', agent.socket]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /\npodCidr\s+10\.243\.0\.0\/24\n/);
    assert.match(r.stdout, /\nleaseTtl\s+15\n/);
    assert.match(r.stdout, /\nkvstoreOpt\s+-\n/);
    assert.doesNotMatch(r.stdout, /podCidrs|leaseTtlSeconds|kvstoreOpts|ipamExpirationMs/);
  });

  test('a config file value of the wrong type is named by the key as written, with its flag', async () => {
    const file = join(scratch, 'agent.yaml');
    await writeFile(file, 'podCidr: [10.0.0.0/24, not-a-cidr]\n');
    const r = await run([AGENT_BIN, '--config', file, '--state-dir', join(scratch, 'state')]);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, 'tendril-agent: invalid agent configuration: podCidr[1] (--pod-cidr): must be a CIDR such as 10.0.0.0/16\n');
    await writeFile(file, 'podCidrs: [10.0.0.0/24]\n');
    const old = await run([AGENT_BIN, '--config', file, '--state-dir', join(scratch, 'state')]);
    assert.match(old.stderr, /unknown key "podCidrs" \(did you mean "podCidr"\?\)/);
  });
});

describe('start-up in a namespace whose lo is down', () => {
  test('says lo is down and how to bring it up, exit code 2, not "FIB table does not exist"', async () => {
    const ns = (await pool.add('lodown')).name;
    await run(['ip', '-n', ns, 'link', 'set', 'lo', 'down']);
    const state = join(scratch, 'lodown');
    const r = await run(['nsenter', `--net=/var/run/netns/${ns}`, '--', AGENT_BIN, '--state-dir', state, '--lib-dir', join(state, 'lib'), '--bpffs-root', `/sys/fs/bpf/${ns}`, '--node-name', 'tdl-lodown', '--pod-cidr', '10.242.0.0/24']);
    await rm(`/sys/fs/bpf/${ns}`, { recursive: true, force: true });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /^tendril-agent: the loopback interface lo is down in the network namespace the agent runs in .*`ip link set lo up`/);
    assert.doesNotMatch(r.stderr, /FIB table|ENOENT|RTM_GETROUTE/);
  });
});

describe('bpf policy get of an endpoint that does not exist', () => {
  test('is NOT_FOUND, as endpoint get is', async () => {
    const ep = await runCli(['endpoint', 'get', '99', '--socket', agent.socket]);
    assert.notEqual(ep.code, 0);
    assert.match(ep.stderr, /NOT_FOUND/);
    const bpf = await runCli(['bpf', 'policy', 'get', '99', '--socket', agent.socket]);
    assert.notEqual(bpf.code, 0, bpf.stdout);
    assert.match(bpf.stderr, /NOT_FOUND: endpoint 99 not found/);
  });
});

describe('the agent\'s log', () => {
  test('JSON records (stderr is a pipe) carry ISO 8601 times', () => {
    const rs = records();
    assert.ok(rs.length > 3, agent.output);
    for (const r of rs) assert.match(String(r.time), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, JSON.stringify(r));
  });

  test('an info line for each policy, service and endpoint change, with names and ids', async () => {
    const ns = await pool.add('pod');
    const list = confListFromBytes(JSON.stringify({ cniVersion: '1.0.0', name: 'tdlpc', plugins: [{ type: 'tendril-cni', socket: agent.socket }] }));
    const att = { containerId: 'tdl-pc-db', netns: ns.path, ifName: 'eth0', args: [['K8S_POD_NAMESPACE', 'prod'], ['K8S_POD_NAME', 'db'], ['TENDRIL_LABELS', 'app=db']] as Array<[string, string]> };
    await runtime.addNetworkList(list, att);
    const imported = await run([process.execPath, CLI_MAIN, 'policy', 'import', '-', '--socket', agent.socket], { input: dbFromWebPolicy({ namespace: 'prod', tcpPort: 5432 }) });
    assert.equal(imported.code, 0, imported.stderr);
    const upsert = await runCli(['service', 'upsert', '--id', '7', '--frontend', '10.96.0.7:80', '--backends', '10.243.0.200:8080', '--socket', agent.socket]);
    assert.equal(upsert.code, 0, upsert.stderr);
    const svcDel = await runCli(['service', 'delete', '7', '--socket', agent.socket]);
    assert.equal(svcDel.code, 0, svcDel.stderr);
    const polDel = await runCli(['policy', 'delete', '--name', 'db-from-web', '--namespace', 'prod', '--socket', agent.socket]);
    assert.equal(polDel.code, 0, polDel.stderr);
    await runtime.delNetworkList(list, att);

    const lines = records().filter((r) => r.level === 30);
    const find = (msg: string, pred: (r: Record<string, unknown>) => boolean) => lines.find((r) => r.msg === msg && pred(r));
    assert.ok(find('endpoint created', (r) => r.containerId === 'tdl-pc-db'), 'endpoint created');
    assert.ok(find('policy added', (r) => r.policy === 'NetworkPolicy/prod/db-from-web'), 'policy added');
    assert.ok(find('service created', (r) => r.service === 7 && r.frontend === '10.96.0.7:80/TCP'), 'service created');
    assert.ok(find('service deleted', (r) => r.service === 7), 'service deleted');
    assert.ok(find('policy deleted', (r) => r.policy === 'NetworkPolicy/prod/db-from-web'), 'policy deleted');
    assert.ok(find('endpoint deleted', (r) => r.containerId === 'tdl-pc-db'), 'endpoint deleted');
  });
});
