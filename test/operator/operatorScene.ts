// The operator's tests' cluster: a fake API server with the tendril CRDs of
// deploy/kubernetes/crds/ (objects are validated against them as the API
// server would), kube-system, and helpers that write the objects agents and
// the kubelet would.
import { KubeConfig, V1MicroTime } from '@kubernetes/client-node';
import { pino, type Logger } from 'pino';
import { LabelSet } from '../../src/labels/index.js';
import { tendrilIdentityObject } from '../../src/k8s/tendrilIdentity.js';
import { operatorConfig, type OperatorFlags } from '../../src/operator/config.js';
import { Operator } from '../../src/operator/operator.js';
import { FakeKubeApi } from '../support/fakeKubeApi.js';

export const NS = 'kube-system';

type Obj = Record<string, unknown> & { metadata: Record<string, unknown> };

export async function startFakeCluster(): Promise<FakeKubeApi> {
  const api = await FakeKubeApi.start({ crds: 'tendril', bookmarkIntervalMs: 200 });
  api.create('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
  api.create('namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'tdl-apps' } });
  return api;
}

export async function kubeConfigOf(api: FakeKubeApi): Promise<KubeConfig> {
  const kc = new KubeConfig();
  kc.loadFromFile(await api.kubeconfig());
  return kc;
}

export const quietLogger = (): Logger => pino({ level: process.env.TENDRIL_LOG_LEVEL ?? 'silent' });

/** An in-process operator with test timings (lease 2 s, GC every 150 ms). */
export async function startOperator(api: FakeKubeApi, flags: OperatorFlags = {}): Promise<Operator> {
  const config = operatorConfig({
    k8sKubeconfig: await api.kubeconfig(),
    healthAddr: '127.0.0.1:0',
    leaderElectionLeaseDuration: '2s',
    gcInterval: '150ms',
    identityGcGrace: '1s',
    ...flags,
  });
  return Operator.start(config, await kubeConfigOf(api), quietLogger());
}

export { waitFor } from '../../src/identity/testing/cluster.js';

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---- objects as the agents and the kubelet write them ---------------------------

export function createPod(api: FakeKubeApi, name: string, namespace = 'tdl-apps'): { name: string; uid: string } {
  const pod = api.create('pods', { apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace }, spec: { containers: [{ name: 'c', image: 'busybox' }] } }) as Obj;
  return { name, uid: String(pod.metadata.uid) };
}

export function createIdentity(api: FakeKubeApi, id: number, app: string): void {
  api.create('tendrilidentities', tendrilIdentityObject(id, LabelSet.parse([`k8s:app=${app}`, 'k8s:io.kubernetes.pod.namespace=tdl-apps'])));
}

/** A TendrilEndpoint as design27.md shapes it; `owner` omitted: no ownerReference (an object the API server's GC cannot judge). */
export function createEndpoint(api: FakeKubeApi, o: { name: string; node: string; identity: number; owner?: { name: string; uid: string }; namespace?: string }): void {
  const metadata: Record<string, unknown> = { name: o.name, namespace: o.namespace ?? 'tdl-apps', labels: { 'tendril.io/node': o.node } };
  if (o.owner !== undefined) metadata.ownerReferences = [{ apiVersion: 'v1', kind: 'Pod', name: o.owner.name, uid: o.owner.uid }];
  api.create('tendrilendpoints', {
    apiVersion: 'tendril.io/v1',
    kind: 'TendrilEndpoint',
    metadata,
    spec: { node: o.node, nodeIP: '192.0.2.10', identity: o.identity, addresses: ['10.200.0.5'], endpointID: 7 },
  });
}

export function createTendrilNode(api: FakeKubeApi, name: string, ipamPodCIDRs?: string[]): void {
  const spec: Record<string, unknown> = {
    addresses: [{ type: 'InternalIP', ip: '192.0.2.10' }],
    podCIDRs: [],
    routingMode: 'tunnel',
    tunnel: { protocol: 'vxlan', port: 8472 },
    health: { status: 'ok' },
    startedAt: new Date().toISOString(),
  };
  if (ipamPodCIDRs !== undefined) spec.ipam = { podCIDRs: ipamPodCIDRs };
  api.create('tendrilnodes', { apiVersion: 'tendril.io/v1', kind: 'TendrilNode', metadata: { name }, spec });
}

/** The node's liveness Lease, renewed `agoMs` ago. */
export function createNodeLease(api: FakeKubeApi, node: string, durationSeconds: number, agoMs = 0): void {
  const t = new V1MicroTime(Date.now() - agoMs).toISOString();
  api.create('leases', {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name: `tendril-node-${node}`, namespace: NS, labels: { 'app.kubernetes.io/part-of': 'tendril', 'tendril.io/node-lease': 'true' } },
    spec: { holderIdentity: node, leaseDurationSeconds: durationSeconds, renewTime: t, acquireTime: t },
  });
}

export function ipamOf(api: FakeKubeApi, node: string): string[] | undefined {
  const o = api.get('tendrilnodes', undefined, node) as { spec?: { ipam?: { podCIDRs?: string[] } } } | undefined;
  return o?.spec?.ipam?.podCIDRs;
}

export function leaseHolder(api: FakeKubeApi): string | undefined {
  const l = api.get('leases', NS, 'tendril-operator') as { spec?: { holderIdentity?: string } } | undefined;
  return l?.spec?.holderIdentity;
}

export async function httpGet(port: number, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: await res.text() };
}

/** One sample of a metric in Prometheus text (labels as written, e.g. `{family="ipv4"}`). */
export function metricValue(text: string, name: string, labels = ''): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}
