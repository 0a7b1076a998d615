// `tendril policy import` of CiliumNetworkPolicy documents, as a process against a
// real agent (fake datapath): the L3/L4 example of deploy/kubernetes is imported;
// a policy with L7 and DNS-name parts is refused whole, the CLI printing each
// refused field with its path and exiting 1, and nothing of it is imported.
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { type FakeNodeAgent, startFakeNodeAgent } from '../agent/testing/fakeNodeAgent.js';
import { runCli } from './testing/cliProcess.js';

const EXAMPLE = fileURLToPath(new URL('../../../deploy/kubernetes/examples/ciliumnetworkpolicy.yaml', import.meta.url));

const L7 = `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {name: l7, namespace: shop}
spec:
  endpointSelector: {matchLabels: {app: web}}
  ingress:
  - fromEndpoints: [{matchLabels: {app: lb}}]
    toPorts:
    - ports: [{port: "80", protocol: TCP}]
      rules:
        http: [{method: GET, path: "/"}]
  egress:
  - toFQDNs: [{matchName: api.example.com}]
    toPorts: [{ports: [{port: "443", protocol: TCP}]}]
  - toEndpoints: [{matchLabels: {app: db}}]
`;

describe('tendril policy import: CiliumNetworkPolicy', () => {
  let dir: string;
  let node: FakeNodeAgent;
  let sock: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tdl-cnpcli-'));
    node = await startFakeNodeAgent({ nodeName: 'tdl-cnpcli', podCidr: '10.97.0.0/24' });
    sock = node.config.socket;
  });

  after(async () => {
    await node?.stop().catch(() => undefined);
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  test('the L3/L4 example is imported', async () => {
    const r = await runCli(['policy', 'import', EXAMPLE, '--socket', sock]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /Imported: TendrilNetworkPolicy\/shop\/web/);
  });

  test('L7 and DNS-name parts: every one printed at its field, exit 1, nothing imported', async () => {
    const file = join(dir, 'l7.yaml');
    await writeFile(file, L7);
    const r = await runCli(['policy', 'import', file, '--socket', sock]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /2 problems:/);
    assert.match(r.stderr, /document 0: spec\.ingress\[0\]\.toPorts\[0\]\.rules: HTTP rules \(rules\.http\) are L7: tendril enforces L3\/L4 only/);
    assert.match(r.stderr, /document 0: spec\.egress\[0\]\.toFQDNs: DNS-name rules \(toFQDNs\) need a DNS proxy, which is L7: tendril enforces L3\/L4 only/);
    assert.doesNotMatch(r.stderr, /unknown field/);
    const got = await runCli(['policy', 'get', '--name', 'l7', '-o', 'json', '--socket', sock]);
    assert.equal(got.code, 0, got.stderr);
    assert.deepEqual((JSON.parse(got.stdout) as { policies: unknown[] }).policies, []);
  });
});
