// What a new user meets on the CLI: messages that name the fix, a table by
// default, -o yaml, policy trace's peers and its one verdict. Against the
// real agent over the fake datapath (no root needed for that part).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse as parseYaml } from 'yaml';
import { dbFromWebPolicy } from '../policy/testing/policies.js';
import { type FakeNodeAgent, startFakeNodeAgent } from '../agent/testing/fakeNodeAgent.js';
import { CLI_MAIN, runCli } from './testing/cliProcess.js';
import { run } from '../../test/support/run.js';
import { requireRoot } from '../../test/support/root.js';

let dir: string;
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'tdl-cli-msg-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

describe('messages that name the fix', () => {
  it('a socket the user may not open: permission denied, run as root', async () => {
    requireRoot('running the CLI as another user');
    // A listening socket in a directory only root may enter: connect() fails with EACCES for anyone else.
    const closed = join(dir, 'root-only');
    mkdirSync(closed, { mode: 0o700 });
    const socket = join(closed, 'tendril.sock');
    const server: Server = createServer((c) => c.destroy());
    await new Promise<void>((resolve) => server.listen(socket, resolve));
    try {
      chmodSync(socket, 0o600);
      const r = await new Promise<{ code: number; stderr: string }>((resolve) => {
        execFile(process.execPath, [CLI_MAIN, 'status', '--socket', socket], { uid: 65534, gid: 65534, cwd: '/' }, (err, _stdout, stderr) => {
          resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stderr });
        });
      });
      assert.notEqual(r.code, 0);
      assert.equal(r.stderr, `tendril: permission denied on ${socket}: run as root\n`);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('no agent at the socket: the path once, the reason, and what to check', async () => {
    const socket = join(dir, 'tdl-no-agent.sock');
    const r = await runCli(['endpoint', 'list', '--socket', socket]);
    assert.equal(r.code, 1);
    assert.equal(r.stderr, `tendril: cannot reach the tendril agent at ${socket}: connect: no such file or directory (is tendril-agent running? pick it with --socket or TENDRIL_SOCK)\n`);
  });

  it('policy delete without a selection names the --all flag, not the API parameter', async () => {
    const r = await runCli(['policy', 'delete', '--socket', join(dir, 'none.sock')]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /--all/);
    assert.doesNotMatch(r.stderr, /all=true/);
  });

  it('an empty or comment-only YAML file: no policy documents in <file>', async () => {
    for (const text of ['', '\n', '# nothing yet\n---\n']) {
      const file = join(dir, 'empty.yaml');
      writeFileSync(file, text);
      const r = await runCli(['policy', 'import', file, '--socket', join(dir, 'none.sock')]);
      assert.equal(r.code, 1);
      assert.equal(r.stderr, `tendril: no policy documents in ${file}\n`);
    }
  });

  it('cni status on the README\'s conflist (cniVersion 1.0.0) says what it did and exits 0', async () => {
    const netconf = mkdtempSync(join(dir, 'netconf-'));
    writeFileSync(
      join(netconf, '10-tendril.conflist'),
      JSON.stringify({ cniVersion: '1.0.0', name: 'tendril', plugins: [{ type: 'tendril-cni', socket: '/var/run/tendril/tendril.sock' }, { type: 'portmap', capabilities: { portMappings: true } }] }),
    );
    const r = await run([process.execPath, CLI_MAIN, 'cni', 'status', 'tendril', '--cache-dir', join(dir, 'cache')], { env: { ...process.env, NETCONFPATH: netconf, CNI_PATH: netconf } });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^tendril: not asked: STATUS needs cniVersion 1\.1\.0 or later, the list has 1\.0\.0 \(plugins tendril-cni, portmap\)\n$/);
  });

  it('trace: a number where labels go is refused and points at --src-endpoint; one peer per side', async () => {
    const sock = ['--socket', join(dir, 'none.sock'), '--dport', '80/tcp'];
    const numeric = await runCli(['policy', 'trace', '--src', '1', '--dst', 'app=db', ...sock]);
    assert.equal(numeric.code, 1);
    assert.match(numeric.stderr, /for endpoint 1 use --src-endpoint 1/);
    const both = await runCli(['policy', 'trace', '--src', 'app=a', '--src-endpoint', '1', '--dst', 'app=db', ...sock]);
    assert.match(both.stderr, /give exactly one of --src, --src-endpoint, --src-k8s-pod or --src-identity/);
    const none = await runCli(['policy', 'trace', '--dst', 'app=db', ...sock]);
    assert.match(none.stderr, /give exactly one of --src/);
  });
});

describe('against an agent', () => {
  let node: FakeNodeAgent;
  let sock: string[];
  let dbId: number;
  before(async () => {
    node = await startFakeNodeAgent({ nodeName: 'tdl-cli-msg', podCidr: '10.87.0.0/24' });
    sock = ['--socket', node.config.socket];
    const api = node.agent.api();
    const conf = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlmsg', type: 'tendril-cni' });
    for (const name of ['web', 'db']) {
      const netns = `/var/run/netns/tdlclimsg${name}`;
      node.datapath.addNetns(netns);
      await api.cni.handle({ command: 'ADD', containerId: `tdl-${name}`, netns, ifName: 'eth0', args: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${name};TENDRIL_LABELS=app=${name}`, config: conf });
    }
    dbId = node.agent.api().endpoints.list().find((e) => e.podName === 'db')!.id;
    await api.policy.import(dbFromWebPolicy({ namespace: 'default', tcpPort: 5432 }));
  });
  after(() => node.stop());

  it('trace with labels and a pod namespace takes them as k8s:, says so, and denies what the policy denies; one verdict line', async () => {
    const ns = 'io.kubernetes.pod.namespace=default';
    const denied = await runCli(['policy', 'trace', '--src', `app=client,${ns}`, '--dst', `app=db,${ns}`, '--dport', '5432/tcp', ...sock]);
    assert.equal(denied.code, 1, denied.stdout + denied.stderr);
    assert.match(denied.stdout, /source: pod namespace default, so labels without a source are k8s:/);
    assert.match(denied.stdout, /destination labels: k8s:app=db k8s:io\.kubernetes\.pod\.namespace=default/);
    assert.match(denied.stdout, new RegExp(`destination: the labels of endpoint ${dbId}`));
    assert.equal(denied.stdout.match(/verdict/gi)?.length, 1, denied.stdout);
    assert.match(denied.stdout, /Final verdict: DENY\n$/);
    const allowed = await runCli(['policy', 'trace', '--src', `app=web,${ns}`, '--dst', `app=db,${ns}`, '--dport', '5432/tcp', ...sock]);
    assert.equal(allowed.code, 0, allowed.stdout + allowed.stderr);
    assert.match(allowed.stdout, /Final verdict: ALLOW\n$/);
  });

  it('trace by endpoint, pod and identity', async () => {
    const byPod = await runCli(['policy', 'trace', '--src-k8s-pod', 'default/web', '--dst-endpoint', String(dbId), '--dport', '5432/tcp', ...sock]);
    assert.equal(byPod.code, 0, byPod.stdout + byPod.stderr);
    assert.match(byPod.stdout, /source: endpoint \d+ \(pod default\/web\)/);
    const webIdentity = node.agent.api().endpoints.list().find((e) => e.podName === 'web')!.identity!;
    const byIdentity = await runCli(['policy', 'trace', '--src-identity', String(webIdentity), '--dst-k8s-pod', 'default/db', '--dport', '80/tcp', ...sock]);
    assert.equal(byIdentity.code, 1, 'port 80 is not allowed');
    const missing = await runCli(['policy', 'trace', '--src-endpoint', '4242', '--dst-k8s-pod', 'default/db', '--dport', '5432/tcp', ...sock]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /endpoint 4242 has no endpoint on this node|NOT_FOUND/);
  });

  it('endpoint get, endpoint policy and policy get print a table by default, and -o json / -o yaml', async () => {
    for (const [args, tableLine] of [
      [['endpoint', 'get', String(dbId)], /^Pod +default\/db$/m],
      [['endpoint', 'policy', String(dbId)], /^DIRECTION +IDENTITY +PORT\/PROTO +ACTION +RULE$/m],
      [['policy', 'get'], /^NetworkPolicy\/default\/db-from-web +enforced$/m],
    ] as const) {
      const human = await runCli([...args, ...sock]);
      assert.equal(human.code, 0, human.stderr);
      assert.match(human.stdout, tableLine, args.join(' '));
      assert.throws(() => JSON.parse(human.stdout), SyntaxError, 'the default is not JSON');
      const json = await runCli([...args, '-o', 'json', ...sock]);
      const yaml = await runCli([...args, '-o', 'yaml', ...sock]);
      assert.equal(yaml.code, 0, yaml.stderr);
      assert.deepEqual(parseYaml(yaml.stdout), JSON.parse(json.stdout), `${args.join(' ')}: yaml and json say the same`);
    }
    const ids = await runCli(['identity', 'list', '-o', 'yaml', ...sock]);
    assert.ok(Array.isArray(parseYaml(ids.stdout)), '-o yaml reaches every command through the shared helper');
    const bad = await runCli(['identity', 'list', '-o', 'xml', ...sock]);
    assert.match(bad.stderr, /use table, json or yaml/);
  });

  it('a port range reads 6000-6007/SCTP in endpoint policy as in bpf policy get; builtin entries read "not enforced"; one RULE column', async () => {
    const range = `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: web-sctp-range, namespace: default }
spec:
  podSelector: { matchLabels: { app: web } }
  policyTypes: [Ingress]
  ingress:
    - from: [ { podSelector: { matchLabels: { app: db } } } ]
      ports: [ { protocol: SCTP, port: 6000, endPort: 6007 } ]
`;
    await node.agent.api().policy.import(range);
    const webId = node.agent.api().endpoints.list().find((e) => e.podName === 'web')!.id;
    const r = await runCli(['endpoint', 'policy', String(webId), ...sock]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^ingress +\d+ +6000-6007\/SCTP +ALLOW +NetworkPolicy\/default\/web-sctp-range$/m, r.stdout);
    assert.doesNotMatch(r.stdout, /\d+\/1[0-5]\b/, 'no port/prefix-length pairs');
    assert.match(r.stdout, /^egress +ANY +ANY +ALLOW +not enforced$/m, r.stdout);
    assert.doesNotMatch(r.stdout, /not-enforced/);
  });

  it('counts read as English: "3 addresses allocated", and one address is "1 address"', async () => {
    const r = await runCli(['status', ...sock]);
    assert.match(r.stdout, /^IPAM +host-scope, 3 addresses allocated$/m, r.stdout);
    const api = node.agent.api();
    // The pods go; the node's router address stays.
    for (const name of ['web', 'db']) {
      await api.cni.handle({ command: 'DEL', containerId: `tdl-${name}`, netns: `/var/run/netns/tdlclimsg${name}`, ifName: 'eth0', args: '', config: JSON.stringify({ cniVersion: '1.0.0', name: 'tdlmsg', type: 'tendril-cni' }) });
    }
    const one = await runCli(['status', ...sock]);
    assert.match(one.stdout, /^IPAM +host-scope, 1 address allocated$/m, one.stdout);
  });

  it('a file that cannot be read is named once, with the reason', async () => {
    const missing = join(dir, 'tdl-no-such-policy.yaml');
    const r = await runCli(['policy', 'import', missing, ...sock]);
    assert.equal(r.code, 1);
    assert.equal(r.stderr, `tendril: cannot read ${missing}: no such file\n`);
    const svc = await runCli(['service', 'upsert', '-f', missing, ...sock]);
    assert.equal(svc.stderr.split(missing).length - 1, 1, svc.stderr);
  });

  it('identity list shows each reserved identity once', async () => {
    const r = await runCli(['identity', 'list', ...sock]);
    const ids = r.stdout.trim().split('\n').slice(1).map((l) => l.split(/\s+/)[0]);
    assert.deepEqual(ids, [...new Set(ids)], r.stdout);
  });
});
