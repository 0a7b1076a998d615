// A NetworkPolicy whose port is a name (`port: postgres`) would allow nothing:
// tendril's endpoints declare no container ports to resolve it against. It is
// refused — by `tendril policy import` (exit 1, the port, the policy and why,
// nothing imported) and by PUT /policy (400) — while the same policy with the
// number is imported. The Kubernetes path is in src/agent/k8sAgent.test.ts. A real agent on the fake datapath.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { buildServer } from '../api/server/server.js';
import { type FakeNodeAgent, startFakeNodeAgent } from '../agent/testing/fakeNodeAgent.js';
import { runCli } from './testing/cliProcess.js';

const policy = (port: string) => `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: db-from-web, namespace: default }
spec:
  podSelector: { matchLabels: { app: db } }
  policyTypes: [Ingress]
  ingress:
    - from: [ { podSelector: { matchLabels: { app: web } } } ]
      ports: [ { protocol: TCP, port: ${port} } ]
`;

describe('a NetworkPolicy with a named port', () => {
  let dir: string;
  let node: FakeNodeAgent;
  let sock: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tdl-namedport-'));
    node = await startFakeNodeAgent({ nodeName: 'tdl-namedport', podCidr: '10.97.1.0/24' });
    sock = node.config.socket;
  });

  after(async () => {
    await node?.stop().catch(() => undefined);
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  test('tendril policy import: exit 1 naming the port, the policy and why; nothing imported', async () => {
    const file = join(dir, 'named.yaml');
    await writeFile(file, policy('postgres'));
    const r = await runCli(['policy', 'import', file, '--socket', sock]);
    assert.equal(r.code, 1, r.stdout);
    assert.match(r.stderr, /document 0: spec\.ingress\[0\]\.ports: named port "postgres" in NetworkPolicy\/default\/db-from-web: tendril does not resolve named ports .*give the port number instead/);
    assert.deepEqual(node.agent.api().policy.list({}).map((p) => p.name), []);
  });

  test('PUT /policy: 400 naming the port', async () => {
    const app = buildServer(node.agent.api(), { validateResponses: true });
    const res = await app.inject({ method: 'PUT', url: '/v1/policy', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ text: policy('postgres') }) });
    await app.close();
    assert.equal(res.statusCode, 400, res.body);
    assert.match((res.json() as { details: string }).details, /named port "postgres"/);
  });

  test('the same policy with the port number is imported', async () => {
    const file = join(dir, 'number.yaml');
    await writeFile(file, policy('5432'));
    const r = await runCli(['policy', 'import', file, '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
  });
});
