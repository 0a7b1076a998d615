import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { V1Endpoint, V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { pino } from 'pino';
import { FakeLoadBalancer } from '../datapath/fake/fakeDatapath.js';
import { ServiceError, ServiceErrorCode, ServiceManager, ServiceStore, type ServiceStatus } from '../service/index.js';
import { K8S_SERVICE_ID_MAX, K8S_SERVICE_ID_MIN, ServiceSync } from './serviceSync.js';

type SvcSpec = NonNullable<V1Service['spec']>;

const k8sService = (name: string, clusterIP: string, spec: Partial<SvcSpec> = {}, status?: V1Service['status']): V1Service => ({
  metadata: { namespace: 'default', name },
  spec: { type: 'ClusterIP', clusterIP, clusterIPs: [clusterIP], ports: [{ name: 'http', port: 80, protocol: 'TCP' }], ...spec },
  ...(status ? { status } : {}),
});
const endpoint = (ip: string, conditions: V1Endpoint['conditions'] = { ready: true }): V1Endpoint => ({ addresses: [ip], conditions });
const slice = (name: string, ips: Array<string | V1Endpoint>): V1EndpointSlice => ({
  metadata: { namespace: 'default', name },
  addressType: 'IPv4',
  endpoints: ips.map((e) => (typeof e === 'string' ? endpoint(e) : e)),
  ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
});

/** Frontend → [ID, backends (ip:port, state unless active)] as the service API holds them. */
function table(list: readonly ServiceStatus[]): Record<string, [number, string[]]> {
  return Object.fromEntries(
    list.map((s) => [
      `${s['frontend-address'].ip}:${s['frontend-address'].port}/${s['frontend-address'].protocol}`,
      [s.id, s['backend-addresses'].map((b) => `${b.ip}:${b.port}${b.state === 'active' ? '' : ` ${b.state}`}`)],
    ]),
  );
}

interface LogLine {
  level: number;
  msg: string;
  [k: string]: unknown;
}

describe('ServiceSync over the service manager and the fake datapath', () => {
  let dir: string;
  let lb: FakeLoadBalancer;
  let lines: LogLine[];
  const logger = () => pino({ level: 'debug' }, { write: (s: string) => void lines.push(JSON.parse(s) as LogLine) });
  const manager = () => new ServiceManager({ loadBalancer: lb, store: new ServiceStore(join(dir, 'services')), log: pino({ level: 'silent' }), localAddresses: () => [], nodeAddresses: () => ['192.0.2.10'] });
  const sync = (services: ServiceManager, retryIntervalMs?: number) => new ServiceSync({ services, nodeName: 'tdl-node-a', logger: logger(), ...(retryIntervalMs ? { retryIntervalMs } : {}) });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'tdl-k8s-svc-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(async () => {
    await rm(join(dir, 'services'), { recursive: true, force: true });
    lb = new FakeLoadBalancer();
    lines = [];
  });

  it('reserves the upper half of the service IDs for Kubernetes', () => {
    assert.equal(K8S_SERVICE_ID_MIN, 32768);
    assert.equal(K8S_SERVICE_ID_MAX, 65535);
  });

  it('writes each frontend under the lowest free ID of the range, follows the slices, and deletes what a Service no longer has', async () => {
    const m = manager();
    const s = sync(m);
    const np = k8sService('web', '10.96.0.10', { type: 'NodePort', ports: [{ name: 'http', port: 80, nodePort: 30080 }] });
    await s.update('default/web', np, [slice('web-a', ['10.0.1.1', '10.0.1.2'])]);
    assert.deepEqual(table(m.list()), {
      '10.96.0.10:80/TCP': [32768, ['10.0.1.1:8080', '10.0.1.2:8080']],
      '0.0.0.0:30080/TCP': [32769, ['10.0.1.1:8080', '10.0.1.2:8080']],
    });
    assert.deepEqual([...lb.services.keys()].sort(), [32768, 32769]);
    // Scaled: one more slice, one endpoint terminating.
    await s.update('default/web', np, [slice('web-a', ['10.0.1.1', endpoint('10.0.1.2', { ready: false, serving: true, terminating: true })]), slice('web-b', ['10.0.1.3'])]);
    assert.deepEqual(table(m.list())['10.96.0.10:80/TCP'], [32768, ['10.0.1.1:8080', '10.0.1.2:8080 terminating', '10.0.1.3:8080']]);
    assert.equal(lb.services.get(32768)!.backendIds.length, 2, 'the terminating backend takes no new connections');
    // The node port changes: the old frontend goes, the new one takes the lowest free ID.
    await s.update('default/web', { ...np, spec: { ...np.spec, ports: [{ name: 'http', port: 80, nodePort: 30090 }] } }, [slice('web-a', ['10.0.1.1'])]);
    assert.deepEqual(table(m.list()), {
      '10.96.0.10:80/TCP': [32768, ['10.0.1.1:8080']],
      '0.0.0.0:30090/TCP': [32769, ['10.0.1.1:8080']],
    });
    await s.update('default/other', k8sService('other', '10.96.0.11'), []);
    assert.equal(m.list().find((x) => x['frontend-address'].ip === '10.96.0.11')!.id, 32770);
    // Deleted: every frontend goes.
    await s.update('default/web', undefined, []);
    assert.deepEqual(Object.keys(table(m.list())), ['10.96.0.11:80/TCP']);
    assert.deepEqual([...lb.services.keys()], [32770]);
  });

  it('a dual-stack Service becomes one service per family, each with its family\'s slice, through the service manager', async () => {
    const m = manager();
    const s = sync(m);
    const svc = k8sService('dual', '10.96.0.12', { clusterIPs: ['10.96.0.12', 'fd00:96::12'], ipFamilies: ['IPv4', 'IPv6'], ipFamilyPolicy: 'PreferDualStack' });
    const v6: V1EndpointSlice = { ...slice('dual-b', ['fd00:10::1', 'fd00:10::2']), addressType: 'IPv6' };
    await s.update('default/dual', svc, [slice('dual-a', ['10.0.1.1']), v6]);
    assert.deepEqual(table(m.list()), {
      '10.96.0.12:80/TCP': [32768, ['10.0.1.1:8080']],
      'fd00:96::12:80/TCP': [32769, ['fd00:10::1:8080', 'fd00:10::2:8080']],
    });
    assert.equal(lb.services.get(32769)!.address, 'fd00:96::12');
    assert.equal(lb.services.get(32769)!.backendIds.length, 2);
    // The IPv6 family removed (ipFamilyPolicy back to SingleStack): its service goes, the IPv4 one stays.
    await s.update('default/dual', k8sService('dual', '10.96.0.12', { ipFamilies: ['IPv4'] }), [slice('dual-a', ['10.0.1.1']), v6]);
    assert.deepEqual(Object.keys(table(m.list())), ['10.96.0.12:80/TCP']);
  });

  it('serializes calls: the last state given wins, and a burst for one Service is applied once', async () => {
    const m = manager();
    const s = sync(m);
    const svc = k8sService('web', '10.96.0.10');
    await s.update('default/web', svc, [slice('web-a', ['10.0.1.1'])]);
    const writes = () => lb.calls.filter((c) => c.op === 'upsertService' || c.op === 'deleteService').length;
    const before = writes();
    await Promise.all([
      s.update('default/web', svc, [slice('web-a', ['10.0.1.1', '10.0.1.2'])]),
      s.update('default/other', k8sService('other', '10.96.0.11'), []),
      s.update('default/web', undefined, []),
      s.update('default/web', svc, [slice('web-a', ['10.0.1.3'])]),
    ]);
    assert.deepEqual(table(m.list()), { '10.96.0.10:80/TCP': [32768, ['10.0.1.3:8080']], '10.96.0.11:80/TCP': [32769, []] });
    assert.equal(writes() - before, 2, 'one write per Service');
  });

  it('keeps every frontend\'s ID across an agent restart and removes what no Service wants any more', async () => {
    const m1 = manager();
    const s1 = sync(m1);
    // A service made through the API (below the range) is not Kubernetes' to remove.
    await m1.upsert(5, { 'frontend-address': { ip: '10.96.5.5', port: 53, protocol: 'UDP' }, 'backend-addresses': [], flags: { type: 'ClusterIP' } });
    await s1.update('default/a', k8sService('a', '10.96.0.1'), [slice('a-1', ['10.0.1.1'])]);
    await s1.update('default/b', k8sService('b', '10.96.0.2', { externalIPs: ['198.51.100.2'] }), [slice('b-1', ['10.0.1.2'])]);
    await s1.update('default/c', k8sService('c', '10.96.0.3'), [slice('c-1', ['10.0.1.3'])]);
    await s1.initialSyncDone();
    const before = table(m1.list());
    assert.deepEqual(Object.values(before).map(([id]) => id).sort((x, y) => x - y), [5, 32768, 32769, 32770, 32771]);
    await s1.stop();
    await m1.stop();

    // The agent restarts: the maps are pinned, the services come back from the store.
    const pinned = lb;
    lb = new FakeLoadBalancer();
    for (const [id, b] of pinned.backends) lb.backends.set(id, b);
    const m2 = manager();
    await m2.restore();
    assert.deepEqual(table(m2.list()), before);
    const s2 = sync(m2);
    // Service a was deleted while the agent was down; the others arrive in another order, a new one with them.
    await s2.update('default/new', k8sService('new', '10.96.0.9'), [slice('new-1', ['10.0.1.9'])]);
    await s2.update('default/c', k8sService('c', '10.96.0.3'), [slice('c-1', ['10.0.1.3', '10.0.1.4'])]);
    await s2.update('default/b', k8sService('b', '10.96.0.2', { externalIPs: ['198.51.100.2'] }), [slice('b-1', ['10.0.1.2'])]);
    const during = table(m2.list());
    assert.deepEqual(during['10.96.0.2:80/TCP']![0], before['10.96.0.2:80/TCP']![0]);
    assert.deepEqual(during['198.51.100.2:80/TCP']![0], before['198.51.100.2:80/TCP']![0]);
    assert.deepEqual(during['10.96.0.3:80/TCP'], [before['10.96.0.3:80/TCP']![0], ['10.0.1.3:8080', '10.0.1.4:8080']]);
    // The new frontend did not take the restored IDs (a's is still there until the sync is done).
    assert.ok(!Object.values(before).some(([id]) => id === during['10.96.0.9:80/TCP']![0]));
    assert.ok(during['10.96.0.1:80/TCP'], 'a stale frontend stays until the initial sync is done');
    await s2.initialSyncDone();
    const after = table(m2.list());
    assert.equal(after['10.96.0.1:80/TCP'], undefined, 'the Service deleted while the agent was down is gone');
    assert.ok(after['10.96.5.5:53/UDP'], 'the API user\'s service stays');
    assert.equal(lb.services.has(before['10.96.0.1:80/TCP']![0]), false);
    assert.deepEqual(Object.keys(after).sort(), ['10.96.0.2:80/TCP', '10.96.0.3:80/TCP', '10.96.0.9:80/TCP', '10.96.5.5:53/UDP', '198.51.100.2:80/TCP']);
    // The freed ID is the lowest free one again.
    await s2.update('default/d', k8sService('d', '10.96.0.4'), []);
    assert.equal(table(m2.list())['10.96.0.4:80/TCP']![0], before['10.96.0.1:80/TCP']![0]);
  });

  it('a frontend the service API refuses is logged and does not stop the others', async () => {
    const m = manager();
    const s = sync(m);
    // The API's user holds the external IP's frontend.
    await m.upsert(7, { 'frontend-address': { ip: '198.51.100.7', port: 80, protocol: 'TCP' }, 'backend-addresses': [], flags: { type: 'ExternalIPs' } });
    await s.update('default/ext', k8sService('ext', '10.96.0.7', { externalIPs: ['198.51.100.7', '198.51.100.8'] }), [slice('ext-1', ['10.0.1.7'])]);
    // A backend the API refuses (a loopback address) fails that Service's frontends only.
    await s.update('default/bad', k8sService('bad', '10.96.0.8'), [slice('bad-1', ['127.0.0.1'])]);
    await s.update('default/good', k8sService('good', '10.96.0.9'), [slice('good-1', ['10.0.1.9'])]);
    const t = table(m.list());
    assert.deepEqual(t['198.51.100.7:80/TCP'], [7, []], 'the user\'s service is untouched');
    assert.ok(t['10.96.0.7:80/TCP'] && t['198.51.100.8:80/TCP'], 'the Service\'s other frontends are written');
    assert.equal(t['10.96.0.8:80/TCP'], undefined);
    assert.deepEqual(t['10.96.0.9:80/TCP']![1], ['10.0.1.9:8080']);
    const refusals = lines.filter((l) => l.msg === 'Kubernetes frontend refused by the service API');
    assert.deepEqual(refusals.map((l) => [l.service, l.frontend, l.code]), [
      ['default/ext', '198.51.100.7:80/TCP', 'SERVICE_CONFLICT'],
      ['default/bad', '10.96.0.8:80/TCP', 'SERVICE_INVALID'],
    ]);
    // Once the Service's endpoints are fine, it is written.
    await s.update('default/bad', k8sService('bad', '10.96.0.8'), [slice('bad-1', ['10.0.1.8'])]);
    assert.deepEqual(table(m.list())['10.96.0.8:80/TCP']![1], ['10.0.1.8:8080']);
  });

  it('a frontend held under a stray ID of the range is the Service\'s once the initial sync is done', async () => {
    const m = manager();
    const s = sync(m);
    await s.update('default/first', k8sService('first', '10.96.0.1'), []);
    // Made through the API in Kubernetes' range after the sync had read the services.
    await m.upsert(40000, { 'frontend-address': { ip: '10.96.0.50', port: 80, protocol: 'TCP' }, 'backend-addresses': [], flags: { type: 'ClusterIP' } });
    await s.update('default/web', k8sService('web', '10.96.0.50'), [slice('web-a', ['10.0.1.1'])]);
    assert.deepEqual(table(m.list())['10.96.0.50:80/TCP'], [40000, []], 'refused (CONFLICT) meanwhile');
    await s.initialSyncDone();
    assert.deepEqual(table(m.list())['10.96.0.50:80/TCP'], [32769, ['10.0.1.1:8080']]);
  });

  it('writes again after a while a frontend the datapath did not take', async () => {
    const m = manager();
    const s = sync(m, 20);
    lb.failNext('upsertService');
    await s.update('default/web', k8sService('web', '10.96.0.10'), [slice('web-a', ['10.0.1.1'])]);
    assert.equal(m.list().length, 0);
    await new Promise((resolve) => setTimeout(resolve, 80));
    await s.stop();
    assert.deepEqual(table(m.list()), { '10.96.0.10:80/TCP': [32768, ['10.0.1.1:8080']] });
    assert.deepEqual(lb.services.get(32768)!.backendIds.length, 1);
  });

  it('applies the Services queued meanwhile as one batch of the service API; a batch whose records cannot be written is retried whole', async () => {
    const m = manager();
    let batches = 0;
    const apply = m.apply.bind(m);
    let failCommit = false;
    m.apply = async (changes) => {
      batches++;
      if (failCommit) {
        failCommit = false;
        throw new ServiceError(ServiceErrorCode.DATAPATH_FAILED, 'fake: the records could not be written');
      }
      return apply(changes);
    };
    const s = sync(m, 20);
    // An informer's initial list: 200 Services at once.
    const updates = Array.from({ length: 200 }, (_, i) => s.update(`default/svc${i}`, k8sService(`svc${i}`, `10.96.1.${i + 1}`), [slice(`svc${i}-a`, [`10.0.2.${i + 1}`])]));
    await Promise.all(updates);
    assert.equal(m.list().length, 200);
    assert.ok(batches <= 2, `${batches} batches for 200 Services`);
    assert.equal(new Set(m.list().map((x) => x.id)).size, 200);
    failCommit = true;
    await s.update('default/svc0', undefined, []);
    await s.update('default/late', k8sService('late', '10.96.2.1'), []);
    assert.ok(m.list().some((x) => x['frontend-address'].ip === '10.96.1.1'), 'the failed batch changed nothing');
    assert.equal(m.list().length, 201, 'the next batch went through');
    await new Promise((resolve) => setTimeout(resolve, 80));
    await s.stop();
    assert.equal(m.list().length, 200, 'svc0 went, late came on the retry');
    assert.ok(m.list().some((x) => x['frontend-address'].ip === '10.96.2.1'));
    assert.ok(!m.list().some((x) => x['frontend-address'].ip === '10.96.1.1'));
  });

  it('serves a Local LoadBalancer\'s healthCheckNodePort: 503 without a ready endpoint on the node, 200 with the count once one is here; gone with the Service\'s need', async () => {
    const local = new Set<string>();
    const m = new ServiceManager({ loadBalancer: lb, store: new ServiceStore(join(dir, 'services')), log: pino({ level: 'silent' }), localAddresses: () => local, nodeAddresses: () => ['192.0.2.10'] });
    await m.restore();
    await m.endpointsRestored();
    const port = await freePort();
    const s = new ServiceSync({ services: m, nodeName: 'tdl-node-a', logger: logger(), healthCheckNodePorts: { host: '127.0.0.1' } });
    const lbService = (externalTrafficPolicy: string) =>
      k8sService('shop', '10.96.0.30', { type: 'LoadBalancer', externalTrafficPolicy, healthCheckNodePort: port, ports: [{ name: 'http', port: 80, nodePort: 30080 }] }, { loadBalancer: { ingress: [{ ip: '192.0.2.50' }] } });
    const slices = [slice('shop-a', ['10.0.1.1', '10.0.1.2', endpoint('10.0.1.3', { ready: false, serving: true, terminating: true })])];
    await s.update('default/shop', lbService('Local'), slices);
    const probe = async () => {
      const r = await fetch(`http://127.0.0.1:${port}/healthz`);
      return { status: r.status, weight: r.headers.get('x-load-balancing-endpoint-weight'), body: (await r.json()) as unknown };
    };
    assert.deepEqual(await probe(), { status: 503, weight: '0', body: { service: { namespace: 'default', name: 'shop' }, localEndpoints: 0, serviceProxyHealthy: true } });
    local.add('10.0.1.1');
    local.add('10.0.1.3');
    await m.localityChanged();
    // The terminating endpoint here is no ready one.
    assert.deepEqual(await probe(), { status: 200, weight: '1', body: { service: { namespace: 'default', name: 'shop' }, localEndpoints: 1, serviceProxyHealthy: true } });
    assert.equal((await fetch(`http://127.0.0.1:${port}/`, { method: 'POST' })).status, 405);
    // Cluster policy: no health check port any more.
    await s.update('default/shop', lbService('Cluster'), slices);
    await assert.rejects(fetch(`http://127.0.0.1:${port}/`), /fetch failed/);
    await s.update('default/shop', lbService('Local'), slices);
    assert.equal((await probe()).status, 200);
    // A port that is no port number (an object written past the API server's validation) opens nothing, and lets the old one go.
    for (const bad of [70000, 0, -1, 1.5, '8080' as unknown as number]) {
      await s.update('default/shop', { ...lbService('Local'), spec: { ...lbService('Local').spec, healthCheckNodePort: bad } }, slices);
      assert.deepEqual([...s.healthChecks!.ports()], [], String(bad));
    }
    await s.stop();
    await assert.rejects(fetch(`http://127.0.0.1:${port}/`), /fetch failed/);
  });

  it('a frontend two Services want is the first one\'s; the other takes it when it is let go', async () => {
    const m = manager();
    const s = sync(m);
    await s.update('default/one', k8sService('one', '10.96.0.1', { externalIPs: ['198.51.100.1'] }), [slice('one-a', ['10.0.1.1'])]);
    await s.update('default/two', k8sService('two', '10.96.0.2', { externalIPs: ['198.51.100.1'] }), [slice('two-a', ['10.0.1.2'])]);
    assert.deepEqual(table(m.list())['198.51.100.1:80/TCP']![1], ['10.0.1.1:8080']);
    assert.ok(lines.some((l) => l.msg.startsWith('frontend already belongs to another Kubernetes Service') && l.service === 'default/two'));
    await s.update('default/one', undefined, []);
    assert.deepEqual(table(m.list())['198.51.100.1:80/TCP']![1], ['10.0.1.2:8080']);
    assert.deepEqual(Object.keys(table(m.list())).sort(), ['10.96.0.2:80/TCP', '198.51.100.1:80/TCP']);
  });

  it('a ClusterIP takes its address back from another Service\'s external IP, whichever came first', async () => {
    const m = manager();
    const s = sync(m);
    // Listed first (namespace order): an external IP on kube-dns's ClusterIP and port.
    await s.update('a-evil/grab', k8sService('grab', '10.96.0.99', { externalIPs: ['10.96.0.10'], ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }), [slice('grab-a', ['10.0.9.9'])]);
    assert.deepEqual(table(m.list())['10.96.0.10:80/TCP']![1], ['10.0.9.9:8080']);
    await s.update('kube-system/dns', k8sService('dns', '10.96.0.10'), [slice('dns-a', ['10.0.1.53'])]);
    assert.deepEqual(table(m.list())['10.96.0.10:80/TCP']![1], ['10.0.1.53:8080'], 'the ClusterIP\'s own backends');
    assert.ok(lines.some((l) => l.msg.startsWith('a ClusterIP takes its frontend back') && l.holder === 'a-evil/grab'));
    // The external IP Service changing again does not take it back.
    await s.update('a-evil/grab', k8sService('grab', '10.96.0.99', { externalIPs: ['10.96.0.10'], ports: [{ name: 'http', port: 80, protocol: 'TCP' }] }), [slice('grab-a', ['10.0.9.8'])]);
    assert.deepEqual(table(m.list())['10.96.0.10:80/TCP']![1], ['10.0.1.53:8080']);
  });

  it('internal and external traffic policies reach the datapath', async () => {
    const m = manager();
    const s = sync(m);
    await s.update('default/np', k8sService('np', '10.96.0.10', { type: 'NodePort', internalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80, nodePort: 30080 }] }), [slice('np-a', ['10.0.1.1'])]);
    const byFrontend = Object.fromEntries(m.list().map((x) => [x['frontend-address'].ip, x.id]));
    // No endpoint is on this node (localAddresses is empty) and locality is live only once endpoints are restored.
    await m.endpointsRestored();
    assert.deepEqual(lb.services.get(byFrontend['10.96.0.10']!)!.backendIds, [], 'ClusterIP, internal Local, no local backend');
    assert.equal(lb.services.get(byFrontend['0.0.0.0']!)!.backendIds.length, 1, 'from outside: every backend');
    assert.deepEqual(lb.services.get(byFrontend['0.0.0.0']!)!.internalBackendIds, []);
  });
});

/** A port free on 127.0.0.1 now (the kernel's pick, let go at once). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}
