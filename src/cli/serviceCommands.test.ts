// `tendril service …` as a process against an agent API serving /v1/service
// over a real ServiceManager (load-balancer maps in memory): argument checks
// before the agent is called, upsert from flags and from JSON (file and
// stdin), the cilium-like table and -o json, the agent's refusals with their
// codes, and the answer without the eBPF datapath.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { run } from '../../test/support/run.js';
import type { ServiceStatus } from '../service/types.js';
import { type ServiceApiServer, startServiceApiServer } from '../agent/testing/serviceApiServer.js';
import { CliError } from './cliError.js';
import { parseBackends, serviceBodyFromFlags, serviceTable } from './serviceCommands.js';
import { CLI_MAIN, runCli } from './testing/cliProcess.js';

const tendril = runCli;

let server: ServiceApiServer;
let sock: string;
let dir: string;

before(async () => {
  server = await startServiceApiServer({ nodeName: 'tdl-svccli', podCidr: '10.95.0.0/24' });
  sock = server.socket;
  dir = await mkdtemp(join(tmpdir(), 'tdl-svccli-files-'));
});

after(async () => {
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('argument checks (no agent needed)', () => {
  test('--backends: ip:port[@weight][=state], states in any case, IPv6 in brackets', () => {
    assert.deepEqual(parseBackends('10.0.0.5:8080,10.0.0.6:8080@3=Terminating, [fd00::1]:80=maintenance'), [
      { ip: '10.0.0.5', port: 8080 },
      { ip: '10.0.0.6', port: 8080, weight: 3, state: 'terminating' },
      { ip: 'fd00::1', port: 80, state: 'maintenance' },
    ]);
    assert.deepEqual(parseBackends(''), []);
    assert.throws(() => parseBackends('10.0.0.5'), (e: unknown) => e instanceof CliError && /backend "10\.0\.0\.5" must be <ip>:<port>/.test(e.message));
    assert.throws(() => parseBackends('10.0.0.5:80=gone'), /state must be one of active, terminating, quarantined, maintenance, got "gone"/);
    assert.throws(() => parseBackends('10.0.0.5:80@70000'), /weight must be a number from 0 to 65535/);
    assert.throws(() => parseBackends('10.0.0.5:0'), /port must be a number from 1 to 65535/);
    assert.throws(() => parseBackends('10.0.0.5:80,,10.0.0.6:80'), /empty entry/);
  });

  test('the body from flags: canonical spellings, defaults left to the agent', () => {
    assert.deepEqual(serviceBodyFromFlags({ frontend: '0.0.0.0:30080', protocol: 'udp', backends: '10.0.0.5:53', type: 'nodeport', trafficPolicy: 'local', sessionAffinity: true, sessionAffinityTimeout: '60' }), {
      'frontend-address': { ip: '0.0.0.0', port: 30080, protocol: 'UDP' },
      'backend-addresses': [{ ip: '10.0.0.5', port: 53 }],
      flags: { type: 'NodePort', trafficPolicy: 'Local', sessionAffinity: true, sessionAffinityTimeout: 60 },
    });
    assert.deepEqual(serviceBodyFromFlags({ frontend: '10.96.0.1:443' }).flags, { type: 'ClusterIP' });
    assert.deepEqual(serviceBodyFromFlags({ frontend: '10.96.0.1:443', internalTrafficPolicy: 'local' }).flags, { type: 'ClusterIP', internalTrafficPolicy: 'Local' });
    assert.throws(() => serviceBodyFromFlags({ frontend: '10.96.0.1:443', internalTrafficPolicy: 'Node' }), /--internal-traffic-policy must be one of Cluster, Local/);
    assert.throws(() => serviceBodyFromFlags({ frontend: '10.96.0.1:443', protocol: 'sctp' }), /--protocol must be one of TCP, UDP/);
    assert.throws(() => serviceBodyFromFlags({ frontend: '10.96.0.1:443', type: 'Headless' }), /--type must be one of ClusterIP, NodePort, ExternalIPs, LoadBalancer/);
    assert.throws(() => serviceBodyFromFlags({}), /give --frontend/);
  });

  test('the table names the traffic policies that are Local', () => {
    const row: ServiceStatus = {
      id: 40000,
      'frontend-address': { ip: '0.0.0.0', port: 30080, protocol: 'TCP' },
      'backend-addresses': [],
      flags: { type: 'NodePort', trafficPolicy: 'Local', internalTrafficPolicy: 'Local', sessionAffinity: false, sessionAffinityTimeout: 10800, sourceRanges: [] },
      realized: true,
    };
    assert.match(serviceTable([row]), /\n40000\s+0\.0\.0\.0:30080\/TCP\s+NodePort \(Local, internal Local\)\s+\(no backends\)\n/);
    assert.match(serviceTable([{ ...row, flags: { ...row.flags, trafficPolicy: 'Cluster' } }]), /NodePort \(internal Local\)/);
    // IPv6 addresses in brackets, so the port stays readable.
    const v6 = { ...row, 'frontend-address': { ip: 'fd00:96::a', port: 80, protocol: 'TCP' as const }, flags: { ...row.flags, type: 'ClusterIP' as const }, 'backend-addresses': [{ ip: 'fd00:10::5', port: 8080, weight: 1, state: 'active' as const, id: 1, local: false }] };
    assert.match(serviceTable([v6]), /\[fd00:96::a\]:80\/TCP\s+ClusterIP.*1 => \[fd00:10::5\]:8080\/TCP \(active\)/);
  });

  test('the CLI refuses bad arguments with exit code 1 before calling the agent', async () => {
    const nowhere = ['--socket', '/nonexistent/tdl.sock'];
    const cases: Array<[string[], RegExp]> = [
      [['service', 'get', 'web'], /service ID must be a number from 1 to 65535, got "web"/],
      [['service', 'delete', '0'], /service ID must be a number from 1 to 65535/],
      [['service', 'upsert', '--frontend', '10.96.0.1:80'], /give --id/],
      [['service', 'upsert', '--id', '70000', '--frontend', '10.96.0.1:80'], /--id must be a number from 1 to 65535/],
      [['service', 'upsert', '--id', '1', '--frontend', '10.96.0.1'], /--frontend must be <ip>:<port>/],
      [['service', 'upsert', '--id', '1', '-f', '-', '--frontend', '10.96.0.1:80'], /-f gives the whole service: drop --frontend/],
      [['service', 'upsert', '--id', '1', '-f', '/nonexistent/tdl.json'], /cannot read \/nonexistent\/tdl\.json/],
      [['service', 'list', '-o', 'yaml'], /cannot reach the tendril agent|unknown output format/],
    ];
    for (const [args, message] of cases) {
      const r = await tendril([...args, ...nowhere]);
      assert.equal(r.code, 1, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message, args.join(' '));
    }
  });
});

describe('tendril service', () => {
  test('upsert from flags: "Created", then "Updated"; the table shows type, backends and states', async () => {
    const args = ['service', 'upsert', '--id', '10', '--frontend', '10.96.0.10:80', '--backends', '10.95.0.5:8080,10.95.0.6:8080@2=terminating', '--socket', sock];
    const created = await tendril(args);
    assert.equal(created.code, 0, created.stderr);
    const lines = created.stdout.trimEnd().split('\n');
    assert.equal(lines[0], 'Created service 10');
    assert.match(lines[1]!, /^ID\s+FRONTEND\s+SERVICE TYPE\s+BACKEND$/);
    assert.match(lines[2]!, /^10\s+10\.96\.0\.10:80\/TCP\s+ClusterIP\s+1 => 10\.95\.0\.5:8080\/TCP \(active\)$/);
    assert.match(lines[3]!, /^\s+2 => 10\.95\.0\.6:8080\/TCP \(terminating, weight 2\)$/);
    const again = await tendril(args);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /^Updated service 10\n/);
    assert.equal(server.services.list().length, 1);
  });

  test('upsert -f: a JSON file (the ID from --id or the file), or stdin; -o json prints the service', async () => {
    const body = {
      id: 11,
      'frontend-address': { ip: '0.0.0.0', port: 30053, protocol: 'UDP' },
      'backend-addresses': [{ ip: '10.95.0.7', port: 53 }],
      flags: { type: 'NodePort', trafficPolicy: 'Local', sessionAffinity: true, sessionAffinityTimeout: 60 },
    };
    const file = join(dir, 'svc.json');
    await writeFile(file, JSON.stringify(body));
    const r = await tendril(['service', 'upsert', '-f', file, '-o', 'json', '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
    const status = JSON.parse(r.stdout) as ServiceStatus;
    assert.equal(status.id, 11);
    assert.deepEqual(status.flags, { type: 'NodePort', trafficPolicy: 'Local', internalTrafficPolicy: 'Cluster', sessionAffinity: true, sessionAffinityTimeout: 60, sourceRanges: [] });
    const { id: _id, ...withoutId } = body;
    const viaStdin = await run([process.execPath, CLI_MAIN, 'service', 'upsert', '--id', '12', '-f', '-', '--socket', sock], {
      input: JSON.stringify({ ...withoutId, 'frontend-address': { ip: '0.0.0.0', port: 30054, protocol: 'TCP' } }),
    });
    assert.equal(viaStdin.code, 0, viaStdin.stderr);
    assert.match(viaStdin.stdout, /^Created service 12\n/);
    assert.match(viaStdin.stdout, /\n12\s+0\.0\.0\.0:30054\/TCP\s+NodePort \(Local, affinity 60s\)\s+1 => 10\.95\.0\.7:53\/TCP \(active\)\n/);
    // What `get -o json` prints can be given back as it is.
    const got = await tendril(['service', 'get', '12', '-o', 'json', '--socket', sock]);
    await writeFile(file, got.stdout);
    const back = await tendril(['service', 'upsert', '-f', file, '--socket', sock]);
    assert.equal(back.code, 0, back.stderr);
    assert.match(back.stdout, /^Updated service 12\n/);
    const noId = await run([process.execPath, CLI_MAIN, 'service', 'upsert', '-f', '-', '--socket', sock], { input: JSON.stringify(withoutId) });
    assert.equal(noId.code, 1);
    assert.match(noId.stderr, /give --id <1-65535>, or an "id" in the file/);
    const notJson = await run([process.execPath, CLI_MAIN, 'service', 'upsert', '--id', '13', '-f', '-', '--socket', sock], { input: '{"frontend-address":' });
    assert.equal(notJson.code, 1);
    assert.match(notJson.stderr, /stdin is not JSON/);
  });

  test('list and get: the table, and -o json the API\'s objects', async () => {
    const list = await tendril(['service', 'list', '--socket', sock]);
    assert.equal(list.code, 0, list.stderr);
    const ids = list.stdout
      .split('\n')
      .slice(1)
      .map((l) => /^(\d+)\s/.exec(l)?.[1])
      .filter((x) => x !== undefined);
    assert.deepEqual(ids, ['10', '11', '12']);
    const json = JSON.parse((await tendril(['service', 'list', '-o', 'json', '--socket', sock])).stdout) as ServiceStatus[];
    assert.deepEqual(json, server.services.list());
    const one = await tendril(['service', 'get', '11', '--socket', sock]);
    assert.equal(one.code, 0, one.stderr);
    assert.match(one.stdout, /\n11\s+0\.0\.0\.0:30053\/UDP\s+NodePort \(Local, affinity 60s\)\s+1 => 10\.95\.0\.7:53\/UDP \(active\)\n$/);
  });

  test('the agent\'s refusals: exit code 1 with the code and the field', async () => {
    const invalid = await tendril(['service', 'upsert', '--id', '14', '--frontend', '127.0.0.1:80', '--socket', sock]);
    assert.equal(invalid.code, 1);
    assert.match(invalid.stderr, /agent: SERVICE_INVALID: frontend-address\.ip: 127\.0\.0\.1 is a loopback address/);
    const conflict = await tendril(['service', 'upsert', '--id', '14', '--frontend', '10.96.0.10:80', '--socket', sock]);
    assert.equal(conflict.code, 1);
    assert.match(conflict.stderr, /agent: SERVICE_CONFLICT: .*already belongs to service 10/);
    const missing = await tendril(['service', 'get', '99', '--socket', sock]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /agent: SERVICE_NOT_FOUND: service 99 not found/);
    const schema = await run([process.execPath, CLI_MAIN, 'service', 'upsert', '--id', '14', '-f', '-', '--socket', sock], { input: JSON.stringify({ 'frontend-address': { ip: '10.96.0.14', port: 80, protocol: 'TCP' }, 'backend-addresses': [], flags: { type: 'ClusterIP' }, color: 'red' }) });
    assert.equal(schema.code, 1);
    assert.match(schema.stderr, /agent: INVALID_REQUEST: invalid request: body must NOT have additional properties "color"/);
    assert.equal(server.services.get(14), undefined);
  });

  test('delete: "Deleted service <id>"; -o json the API\'s answer; a second delete is 404', async () => {
    const r = await tendril(['service', 'delete', '12', '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'Deleted service 12\n');
    const j = await tendril(['service', 'delete', '11', '-o', 'json', '--socket', sock]);
    assert.deepEqual(JSON.parse(j.stdout), { deleted: 11 });
    const again = await tendril(['service', 'delete', '11', '--socket', sock]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /SERVICE_NOT_FOUND/);
    assert.deepEqual(server.services.list().map((s) => s.id), [10]);
  });

  test('without the eBPF datapath: exit code 1 and the agent\'s reason', async () => {
    for (const args of [['service', 'list'], ['service', 'upsert', '--id', '1', '--frontend', '10.96.0.1:80']]) {
      const r = await tendril([...args, '--socket', server.socketWithoutServices]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /agent: SERVICE_UNSUPPORTED: services need the eBPF datapath/);
    }
  });

  test('apply -f: many services in batches (one with more backends than a batch takes goes alone), each one\'s outcome, exit 1 when any failed', async () => {
    const svc = (id: number, ip: string, backends = 3) => ({
      id,
      'frontend-address': { ip, port: 80, protocol: 'TCP' },
      'backend-addresses': Array.from({ length: backends }, (_, j) => ({ ip: `10.95.${1 + (j >> 8)}.${j & 255}`, port: 8080 })),
      flags: { type: 'ClusterIP' },
    });
    const many = Array.from({ length: 300 }, (_, i) => svc(1000 + i, `10.97.${i >> 7}.${(i & 127) + 1}`));
    const big = svc(2000, '10.97.9.1', 70);
    const bad = svc(2001, '127.0.0.1');
    const file = join(dir, 'many.json');
    await writeFile(file, JSON.stringify([...many, big, bad]));
    const r = await tendril(['service', 'apply', '-f', file, '--socket', sock]);
    assert.equal(r.code, 1, r.stderr);
    assert.equal(r.stdout, 'Applied 302 services: 301 created, 0 updated, 0 unchanged, 1 failed\n  service 2001: SERVICE_INVALID: frontend-address.ip: 127.0.0.1 is a loopback address\n');
    assert.equal(server.services.get(2000)!['backend-addresses'].length, 70);
    assert.equal(server.services.get(1299)!['frontend-address'].ip, '10.97.2.44');
    // Again, with one changed: the rest is unchanged; -o json gives each change's result.
    many[5]!['backend-addresses'].pop();
    await writeFile(file, JSON.stringify(many));
    const again = await tendril(['service', 'apply', '-f', file, '-o', 'json', '--socket', sock]);
    assert.equal(again.code, 0, again.stderr);
    const results = JSON.parse(again.stdout) as Array<{ id: number; result: string }>;
    assert.deepEqual(results.filter((x) => x.result !== 'unchanged').map((x) => [x.id, x.result]), [[1005, 'updated']]);
    assert.equal(results.length, 300);
    // A file that names an ID twice, or none, is refused before the agent is called.
    await writeFile(file, JSON.stringify([svc(3000, '10.97.8.1'), svc(3000, '10.97.8.2')]));
    assert.match((await tendril(['service', 'apply', '-f', file, '--socket', sock])).stderr, /service 3000 is given twice/);
    await writeFile(file, JSON.stringify([{ ...svc(3000, '10.97.8.1'), id: undefined }]));
    assert.match((await tendril(['service', 'apply', '-f', file, '--socket', sock])).stderr, /item 0 has no "id"/);
    assert.equal(server.services.get(3000), undefined);
    for (const s of [...many, big]) await server.services.delete(s.id);
  });
});
