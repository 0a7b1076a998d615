// A service frontend on an address the cluster gives a pod is refused, also
// when the pod is on another node: the node's own connections to that pod
// would land on the service's backends instead. Two real agents (fake
// datapath) on one etcd; the pod's address reaches node A through the
// kvstore's ipcache and node registry, as on a cluster. The API and the CLI
// both answer 400 naming the field and why; an address elsewhere is served.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type EtcdHarness, startEtcd } from '../../test/support/etcdHarness.js';
import type { Result100 } from '../cni/index.js';
import { runCli } from '../cli/testing/cliProcess.js';
import { AgentClient } from '../client/agentClient.js';
import { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlsvcfe', type: 'tendril-cni' });

let etcd: EtcdHarness;
const nodes: FakeNodeAgent[] = [];
let a: FakeNodeAgent;
let remotePodIp = '';

async function until(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

before(async () => {
  etcd = await startEtcd();
  a = await startFakeNodeAgent({ nodeName: 'tdl-svcfe-a', podCidr: '10.86.1.0/24', kvstore: { etcdEndpoint: etcd.endpoint }, datapath: new FakeDatapath({ nodeLinks: ['eth0'], loadBalancer: true }) });
  nodes.push(a);
  const b = await startFakeNodeAgent({ nodeName: 'tdl-svcfe-b', podCidr: '10.86.2.0/24', kvstore: { etcdEndpoint: etcd.endpoint } });
  nodes.push(b);
  const netns = '/var/run/netns/tdlsvcfe-pod';
  b.datapath.addNetns(netns);
  const { result } = (await b.agent.api().cni.handle({ command: 'ADD', containerId: 'tdl-svcfe-pod', netns, ifName: 'eth0', args: 'TENDRIL_LABELS=app=db', config: CONF })) as { result?: Result100 };
  remotePodIp = result!.ips![0]!.address.split('/')[0]!;
  await until('node A to learn the remote pod from the kvstore', () => a.agent.api().ipcache.list().some((e) => e.prefix === `${remotePodIp}/32`));
});

after(async () => {
  for (const n of nodes.splice(0).reverse()) await n.stop();
  await etcd?.destroy();
});

const service = (ip: string) => ({
  'frontend-address': { ip, port: 80, protocol: 'TCP' as const },
  'backend-addresses': [{ ip: '10.86.1.50', port: 8080 }],
  flags: { type: 'ClusterIP' as const },
});

describe('a ClusterIP frontend on an address of the cluster\'s pods', () => {
  test('a pod\'s address on another node: the API answers 400 naming the field and the pod; nothing is made', async () => {
    const client = new AgentClient({ socketPath: a.config.socket, timeoutMs: 10_000 });
    await assert.rejects(client.putService(41, service(remotePodIp)), (err: Error) => {
      assert.match(err.message, /SERVICE_INVALID|frontend-address\.ip/);
      assert.match(err.message, new RegExp(`frontend-address\\.ip: ${remotePodIp.replaceAll('.', '\\.')} is a pod's address \\(ipcache identity \\d+, from node:tdl-svcfe-b\\)`));
      return true;
    });
    assert.equal(a.agent.api().services!.get(41), undefined);
  });

  test('the CLI: exit 1 with the agent\'s reason, for the remote pod, a free address of the other node\'s pod CIDR and a local pod', async () => {
    const cases: Array<[string, RegExp]> = [
      [remotePodIp, /is a pod's address \(ipcache identity/],
      ['10.86.2.200', /is in node tdl-svcfe-b's pod CIDR 10\.86\.2\.0\/24/],
    ];
    for (const [ip, why] of cases) {
      const r = await runCli(['service', 'upsert', '--id', '42', '--frontend', `${ip}:80`, '--backends', '10.86.1.50:8080', '--socket', a.config.socket]);
      assert.equal(r.code, 1, r.stdout + r.stderr);
      assert.match(r.stderr, /agent: SERVICE_INVALID: frontend-address\.ip: /);
      assert.match(r.stderr, why);
    }
    assert.equal(a.agent.api().services!.get(42), undefined);
  });

  test('a ClusterIP no pod can have is still served', async () => {
    const r = await a.agent.api().services!.upsert(43, service('10.96.0.43'));
    assert.equal(r.created, true);
  });
});
