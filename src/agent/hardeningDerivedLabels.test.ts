// A pod names neither its own namespace nor what Kubernetes says about it
// (its namespace's labels, its service account, its cluster): those keys, in
// tendril's and Cilium's spelling, with any source prefix or none and in any
// case, are refused at every door labels come in by — CNI_ARGS
// TENDRIL_LABELS, the netconf's args.tendril.labels, PUT /endpoint and PATCH
// /endpoint/{id}/labels — with CNI code 7 / HTTP 400 naming the key, and
// nothing is created or changed. The real agent over the fake datapath (no
// root); test/e2e/hardeningDerivedLabels.test.ts shows it on packets.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import type { CniRequest, ErrorResponse } from '../api/types.js';
import { CniErrorCode } from '../cni/index.js';
import type { FakeDatapath } from '../datapath/fake/fakeDatapath.js';
import { runCniCall } from '../api/server/cniRoute.js';
import { type AgentApi, buildServer } from '../api/server/server.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

let node: FakeNodeAgent;
let datapath: FakeDatapath;
let api: AgentApi;
let app: FastifyInstance;
let pods = 0;
const silent = pino({ level: 'silent' });

before(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-derived', podCidr: '10.92.0.0/24' });
  datapath = node.datapath;
  api = node.agent.api();
  app = buildServer(api, { validateResponses: true });
  await app.ready();
});

after(async () => {
  await app?.close();
  await node?.stop();
});

/** The keys of the issue in both spellings, and capitalised (a key without '/' may hold capitals). */
const KEYS = [
  'io.kubernetes.pod.namespace',
  'io.tendril.k8s.namespace.labels.team',
  'io.tendril.k8s.policy.serviceaccount',
  'io.tendril.k8s.policy.cluster',
  'io.cilium.k8s.namespace.labels.team',
  'io.cilium.k8s.policy.serviceaccount',
  'io.cilium.k8s.policy.cluster',
  'IO.KUBERNETES.POD.NAMESPACE',
  'IO.Tendril.K8S.namespace.labels.team',
];
const PREFIXES = ['', 'k8s:', 'container:', 'unspec:'];
const keyMessage = (key: string) => new RegExp(`"${key.replace(/\./g, '\\.')}".*derived from Kubernetes`);

function newPod(): string {
  const path = `/var/run/netns/tdlderived${pods++}`;
  datapath.addNetns(path);
  return path;
}

async function snapshot(): Promise<unknown> {
  return {
    endpoints: api.endpoints.list().map((e) => `${e.id}:${e.labels.join(',')}`),
    allocations: (await api.ipam.list()).map((a) => `${a.owner}=${a.ip}`).sort(),
    interfaces: await datapath.listPodHostInterfaces(),
  };
}

function addRequest(netns: string, args: string, labels?: unknown): CniRequest {
  const config = { cniVersion: '1.1.0', name: 'tdlderived', type: 'tendril-cni', ...(labels === undefined ? {} : { args: { tendril: { labels } } }) };
  return { command: 'ADD', path: '/opt/cni/bin', containerId: `tdl-derived-${pods}`, ifName: 'eth0', netns, args, config: JSON.stringify(config) };
}

/** An ADD as tendril-cni relays it: what it would print and exit with. */
async function add(req: CniRequest): Promise<{ exitCode: number; out: { code?: number; msg?: string; details?: string; ips?: unknown } }> {
  const { exitCode, output } = await runCniCall(api.cni, req, silent);
  return { exitCode, out: JSON.parse(output) as { code?: number; msg?: string } };
}

async function assertRefusedAdd(req: CniRequest, key: string): Promise<void> {
  const before = await snapshot();
  const r = await add(req);
  assert.equal(r.exitCode, 1, `${key}: ${JSON.stringify(r.out)}`);
  assert.equal(r.out.code, CniErrorCode.InvalidNetworkConfig, JSON.stringify(r.out));
  assert.match(`${r.out.msg} ${r.out.details ?? ''}`, keyMessage(key));
  assert.deepEqual(await snapshot(), before, 'nothing created');
}

describe('CNI ADD', () => {
  for (const ns of ['evil', undefined]) {
    const podArgs = ns ? `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=p` : 'IgnoreUnknown=1';
    test(`CNI_ARGS TENDRIL_LABELS with a derived key is code 7 naming it (${ns ? `K8S_POD_NAMESPACE=${ns}` : 'no K8S_POD_NAMESPACE'}), plain and percent-encoded`, async () => {
      const netns = newPod();
      for (const key of KEYS) {
        for (const prefix of PREFIXES) {
          await assertRefusedAdd(addRequest(netns, `${podArgs};TENDRIL_LABELS=app=web,${prefix}${key}=trusted`), key);
          await assertRefusedAdd(addRequest(netns, `${podArgs};TENDRIL_LABELS=${encodeURIComponent(`${prefix}${key}=trusted`)}`), key);
        }
      }
    });

    test(`the netconf's args.tendril.labels, as a list or a map, with a derived key is code 7 naming it (${ns ?? 'no namespace'})`, async () => {
      const netns = newPod();
      for (const key of KEYS) {
        for (const prefix of PREFIXES) {
          await assertRefusedAdd(addRequest(netns, podArgs, ['app=web', `${prefix}${key}=trusted`]), key);
          await assertRefusedAdd(addRequest(netns, podArgs, { app: 'web', [`${prefix}${key}`]: 'trusted' }), key);
        }
      }
    });
  }

  test('K8S_POD_NAMESPACE still gives the namespace label, beside the pod\'s own labels', async () => {
    const netns = newPod();
    const r = await add(addRequest(netns, 'IgnoreUnknown=1;K8S_POD_NAMESPACE=evil;K8S_POD_NAME=ok;TENDRIL_LABELS=app=web', ['tier=front']));
    assert.equal(r.exitCode, 0, JSON.stringify(r.out));
    const ep = api.endpoints.list().find((e) => e.netns === netns)!;
    assert.deepEqual([...ep.labels].sort(), ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=evil', 'k8s:tier=front']);
    await api.endpoints.delete(ep.id);
  });
});

const json = { 'content-type': 'application/json' };

async function call(method: 'PUT' | 'PATCH' | 'POST', url: string, payload?: unknown): Promise<{ status: number; body: ErrorResponse & Record<string, unknown> }> {
  const r = await app.inject({ method, url, ...(payload === undefined ? {} : { headers: json, payload: JSON.stringify(payload) }) });
  return { status: r.statusCode, body: r.json() };
}

describe('the API', () => {
  let veths = 0;
  /** A pod's namespace, veth pair and address allocated to its owner: what PUT /endpoint adopts. */
  async function adoptable(): Promise<{ containerId: string; ifName: string; netns: string; hostIfName: string; addresses: string[] }> {
    const netns = newPod();
    const hostIfName = `tdlderv${veths++}`;
    datapath.createVethPair(hostIfName, netns, 'eth0');
    const containerId = `tdl-derived-put-${veths}`;
    const r = await call('POST', `/v1/ipam?owner=${containerId}`);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return { containerId, ifName: 'eth0', netns, hostIfName, addresses: [(r.body.address as { ip: string }).ip] };
  }

  test('PUT /endpoint with a derived key in labels is 400 naming it, with or without podNamespace; nothing adopted', async () => {
    const body = await adoptable();
    for (const key of KEYS) {
      for (const prefix of PREFIXES) {
        for (const podNamespace of [{ podNamespace: 'evil' }, {}]) {
          const before = await snapshot();
          const r = await call('PUT', `/v1/endpoint/container-id:${body.containerId}`, { ...body, ...podNamespace, labels: ['app=web', `${prefix}${key}=trusted`] });
          assert.equal(r.status, 400, JSON.stringify(r.body));
          assert.equal(r.body.code, 'INVALID_REQUEST');
          assert.match(r.body.message, keyMessage(key));
          assert.deepEqual(await snapshot(), before);
        }
      }
    }
    // The same body without the claim is adopted, its namespace from podNamespace.
    const ok = await call('PUT', `/v1/endpoint/container-id:${body.containerId}`, { ...body, podNamespace: 'evil', labels: ['app=web'] });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    assert.deepEqual([...(ok.body.labels as string[])].sort(), ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=evil']);
  });

  test('PATCH /endpoint/{id}/labels can neither add nor delete a derived key: 400 naming it, labels unchanged', async () => {
    const body = await adoptable();
    const put = await call('PUT', `/v1/endpoint/container-id:${body.containerId}`, { ...body, podNamespace: 'evil', labels: ['app=web'] });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    const id = put.body.id as number;
    const labelsNow = () => [...api.endpoints.list().find((e) => e.id === id)!.labels].sort();
    const before = labelsNow();
    for (const key of KEYS) {
      for (const prefix of PREFIXES) {
        const r = await call('PATCH', `/v1/endpoint/${id}/labels`, { add: [`${prefix}${key}=trusted`] });
        assert.equal(r.status, 400, `${prefix}${key}: ${JSON.stringify(r.body)}`);
        assert.match(r.body.message, keyMessage(key));
        assert.deepEqual(labelsNow(), before);
      }
    }
    for (const text of ['io.kubernetes.pod.namespace', 'k8s:io.kubernetes.pod.namespace', 'IO.KUBERNETES.POD.NAMESPACE', 'any:io.kubernetes.pod.namespace']) {
      const r = await call('PATCH', `/v1/endpoint/${id}/labels`, { delete: [text] });
      assert.equal(r.status, 400, `${text}: ${JSON.stringify(r.body)}`);
      assert.match(r.body.message, /derived from Kubernetes/);
      assert.deepEqual(labelsNow(), before, 'the namespace label stays');
    }
    const ok = await call('PATCH', `/v1/endpoint/${id}/labels`, { add: ['tier=front'], delete: ['app'] });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.deepEqual(labelsNow(), ['k8s:io.kubernetes.pod.namespace=evil', 'k8s:tier=front']);
  });
});
