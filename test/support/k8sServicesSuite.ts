// Services and EndpointSlices from the Kubernetes API (the fake API server on
// loopback) become load-balancer entries of an agent with the eBPF datapath,
// checked with real connections between pod namespaces: a ClusterIP answers
// from the slice's pods; scaling the slice (endpoints added, removed, a second
// slice) changes the backends new connections reach; an endpoint marked
// terminating (serving, not ready) drains: its open connections go on, new ones
// go to the others; ClientIP session affinity pins a client; a NodePort, an
// external IP and a LoadBalancer ingress IP answer an outside host; a Service
// deleted from the API leaves no frontend. The agent is pointed at the API
// server with --k8s-api-server alone (the other files use a kubeconfig).
// One suite for every family (family.ts): the wrappers
// test/e2e/k8sServices*.test.ts run it on IPv4, IPv6 (IPv6 single-stack
// Services, EndpointSlices of addressType IPv6) and dual-stack pods (every
// row on both IP versions, a Service of each family side by side).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Flow } from '../../src/flow/types.js';
import { addressIn, cidrIn, type Family, type IpFamily, ipIn, versionsOf } from './family.js';
import { endpointSliceObject, type K8sPod, type K8sScene, OUTSIDE_NODE_IP as OUTSIDE_NODE_T, servicesAt, type SliceEndpoint, serviceObject, startK8sScene, waitServiceBackends } from './k8sScene.js';
import { NetnsPool } from './netns.js';
import { requireRoot } from './root.js';
import { runOk } from './run.js';
import { assertAllAnswered } from './serviceApi.js';
import { movedSessions, shareByBackend } from './serviceProcess.js';
import { rowTitle } from './serviceScene.js';

const NS = 'tdl-k8s-svc';
const TCP_PORT = 8080;
/** IPv4 templates (family.ts mirrors them on IPv6). */
const VIP_T = '10.96.140.10';
const VIP_NODEPORT_T = '10.96.140.11';
const NODE_PORT = 30180;
const VIP_STICKY_T = '10.96.140.12';
const VIP_LB_T = '10.96.140.13';
const LB_NODE_PORT = 30181;
/** Routed to the node by the outside host; no interface holds them. */
const EXTERNAL_IP_T = '10.200.1.10';
const LB_INGRESS_IP_T = '10.200.1.20';
/** A change in the API must reach the datapath within this. */
const FOLLOW_MS = 10_000;
const SLICE_PORTS = [{ name: 'http', port: TCP_PORT }];

/** The Kubernetes Service suite on one family; `tag` keeps the namespaces of concurrent runs apart. */
export function k8sServicesSuite(family: Family, tag: string): void {
  requireRoot('the Kubernetes Service tests');
  const pool = new NetnsPool(tag);
  let scene: K8sScene | undefined;
  const pods: Record<string, K8sPod> = {};
  const backendKey = (n: string) => `${NS}/${n}`;

  before(async () => {
    scene = await startK8sScene(pool, { nodeName: `tdl-node-${tag}`, podCidr: '10.245.0.0/24', family, namespaces: { [NS]: {} }, tcpPorts: [TCP_PORT], outside: true, connect: 'api-server' });
    for (const v of versionsOf(family)) await runOk(['ip', '-n', scene.outside!.netns, `-${v}`, 'route', 'add', cidrIn(v, '10.200.1.0/24'), 'via', ipIn(v, OUTSIDE_NODE_T)]);
    for (const name of ['be-a', 'be-b', 'be-c']) pods[name] = await scene.addPod({ name, namespace: NS, labels: { app: 'backend' } });
    pods.client = await scene.addPod({ name: 'client', namespace: NS, labels: { app: 'client' } });
  });

  after(async () => {
    if (scene) await scene.cleanup();
    else await pool.cleanup();
  });

  for (const v of versionsOf(family)) rowsOn(v);

  /** Every row on IP version `v`: its own Services (named with a `-v6` suffix on IPv6), its slices of that addressType. */
  function rowsOn(v: IpFamily): void {
    const title = (t: string) => rowTitle(family, v, t);
    const named = (name: string) => (v === 6 ? `${name}-v6` : name);
    const podIp = (n: string) => addressIn(`pod ${n}`, pods[n]!.addresses, v);
    const VIP = ipIn(v, VIP_T);
    const VIP_NODEPORT = ipIn(v, VIP_NODEPORT_T);
    const VIP_STICKY = ipIn(v, VIP_STICKY_T);
    const VIP_LB = ipIn(v, VIP_LB_T);
    const EXTERNAL_IP = ipIn(v, EXTERNAL_IP_T);
    const LB_INGRESS_IP = ipIn(v, LB_INGRESS_IP_T);
    const OUTSIDE_NODE_IP = ipIn(v, OUTSIDE_NODE_T);
    // NodePorts are one number space per cluster (the API server refuses one taken): IPv6's Services take their own.
    const NODE_PORT_V = v === 6 ? NODE_PORT + 10 : NODE_PORT;
    const LB_NODE_PORT_V = v === 6 ? LB_NODE_PORT + 10 : LB_NODE_PORT;

    const slice = (name: string, eps: SliceEndpoint[]) => endpointSliceObject(NS, named(name), named('web'), scene!.nodeName, eps, SLICE_PORTS, v);
    const ready = (...names: string[]): SliceEndpoint[] => names.map((n) => ({ pod: pods[n]! }));
    const active = (...names: string[]) => names.map((n) => `${hostPortOf(podIp(n))} active`);
    /** How waitServiceBackends spells a backend: `address:port`, no brackets on IPv6. */
    const hostPortOf = (ip: string) => `${ip}:${TCP_PORT}`;

    /** Replaces an EndpointSlice in the fake API (as the EndpointSlice controller does). */
    function putSlice(name: string, eps: SliceEndpoint[]): void {
      const now = scene!.fake.get('endpointslices', NS, named(name)) as { metadata: object } | undefined;
      const next = slice(name, eps) as { metadata: object };
      if (now) scene!.fake.update('endpointslices', { ...next, metadata: { ...now.metadata, ...next.metadata } });
      else scene!.fake.create('endpointslices', next);
    }

    async function spread(count: number): Promise<Map<string, number>> {
      const sessions = await scene!.agent(backendKey('client')).tcpSessions({ dst: VIP, port: 80 }, { count, requests: 2, concurrency: 10 });
      await assertAllAnswered(scene!.node, sessions, `client -> ${VIP}:80`);
      assert.equal(movedSessions(sessions).length, 0, 'no connection changed backend');
      return shareByBackend(sessions);
    }

    const names = (share: Map<string, number>) => [...share.keys()].sort();

    test(title('a Service with an EndpointSlice: the ClusterIP answers from the slice\'s pods'), async (t) => {
      const created = Date.now();
      scene!.fake.create('services', serviceObject(NS, named('web'), { clusterIP: VIP, selector: { app: 'backend' }, ports: [{ name: 'http', port: 80, targetPort: TCP_PORT }] }));
      putSlice('web-1', ready('be-a', 'be-b'));
      const ms = await waitServiceBackends(scene!.node, { ip: VIP, port: 80 }, active('be-a', 'be-b'), FOLLOW_MS);
      t.diagnostic(`Service + EndpointSlice created -> frontend realized with 2 backends in ${ms} ms (${Date.now() - created} ms)`);
      const share = await spread(40);
      assert.deepEqual(names(share), [backendKey('be-a'), backendKey('be-b')], JSON.stringify(Object.fromEntries(share)));
      // The backend saw the client pod itself (no SNAT in the cluster).
      const peers = (await scene!.agent(backendKey('client')).tcpSessions({ dst: VIP, port: 80 }, { count: 3, requests: 1 })).map((s) => s.answers[0]?.peer);
      assert.deepEqual([...new Set(peers)], [podIp('client')]);
      // The flow history names the Service those connections were load-balanced for.
      const observed = await scene!.node.cli(['observe', '--to-service', `${NS}/${named('web')}`, '--from-ip', podIp('client'), '--last', '5', '-o', 'json']);
      assert.equal(observed.code, 0, observed.stderr);
      const flows = observed.stdout.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Flow);
      assert.ok(flows.length > 0, 'flows to the Service');
      assert.ok(flows.every((f) => f.event.service?.name === `${NS}/${named('web')}` && f.event.destination.port === TCP_PORT), JSON.stringify(flows[0]));
    });

    test(title('scaling the slice: an endpoint added takes connections; one removed takes none'), async (t) => {
      let changed = Date.now();
      putSlice('web-1', ready('be-a', 'be-b', 'be-c'));
      t.diagnostic(`endpoint added -> realized in ${await waitServiceBackends(scene!.node, { ip: VIP, port: 80 }, active('be-a', 'be-b', 'be-c'), FOLLOW_MS)} ms (${Date.now() - changed} ms)`);
      assert.deepEqual(names(await spread(60)), ['be-a', 'be-b', 'be-c'].map(backendKey));
      changed = Date.now();
      putSlice('web-1', ready('be-b', 'be-c'));
      t.diagnostic(`endpoint removed -> realized in ${await waitServiceBackends(scene!.node, { ip: VIP, port: 80 }, active('be-b', 'be-c'), FOLLOW_MS)} ms (${Date.now() - changed} ms)`);
      assert.deepEqual(names(await spread(40)), ['be-b', 'be-c'].map(backendKey));
    });

    test(title('a second EndpointSlice of the service adds its endpoints; deleting it takes them away'), async () => {
      putSlice('web-2', ready('be-a'));
      await waitServiceBackends(scene!.node, { ip: VIP, port: 80 }, active('be-a', 'be-b', 'be-c'), FOLLOW_MS);
      assert.deepEqual(names(await spread(60)), ['be-a', 'be-b', 'be-c'].map(backendKey));
      scene!.fake.delete('endpointslices', NS, named('web-2'));
      await waitServiceBackends(scene!.node, { ip: VIP, port: 80 }, active('be-b', 'be-c'), FOLLOW_MS);
      assert.deepEqual(names(await spread(30)), ['be-b', 'be-c'].map(backendKey));
    });

    test(title('a terminating endpoint (serving, terminating, not ready) drains: its open connections go on, new ones go to the others'), async () => {
      const client = scene!.agent(backendKey('client'));
      // Connections held open, until some sit on be-b.
      const held: Array<{ handle: number; backend: string }> = [];
      for (let i = 0; i < 30 && held.filter((h) => h.backend === backendKey('be-b')).length < 2; i++) {
        const { handle, session } = await client.tcpOpen({ dst: VIP, port: 80 });
        assert.equal(session.outcome, 'open', JSON.stringify(session));
        held.push({ handle, backend: session.answers[0]!.name });
      }
      const onB = held.filter((h) => h.backend === backendKey('be-b'));
      assert.ok(onB.length > 0, `some held connection reached be-b: ${JSON.stringify(held)}`);
      try {
        putSlice('web-1', [{ pod: pods['be-b']!, conditions: { ready: false, serving: true, terminating: true } }, { pod: pods['be-c']! }]);
        await waitServiceBackends(scene!.node, { ip: VIP, port: 80 }, [`${hostPortOf(podIp('be-b'))} terminating`, ...active('be-c')], FOLLOW_MS);
        for (const h of held) {
          const s = await client.tcpAsk(h.handle);
          assert.equal(s.outcome, 'open', `held connection on ${h.backend} after be-b began terminating: ${JSON.stringify(s)}`);
          assert.equal(s.answers.at(-1)!.name, h.backend, 'it stays on its backend');
        }
        assert.deepEqual(names(await spread(30)), [backendKey('be-c')], 'new connections avoid the terminating endpoint');
        // The last endpoint gone: Kubernetes' rule, the terminating one serves new connections while nothing else is ready.
        putSlice('web-1', [{ pod: pods['be-b']!, conditions: { ready: false, serving: true, terminating: true } }]);
        await waitServiceBackends(scene!.node, { ip: VIP, port: 80 }, [`${hostPortOf(podIp('be-b'))} terminating`], FOLLOW_MS);
        assert.deepEqual(names(await spread(10)), [backendKey('be-b')], 'only a terminating endpoint left: it takes new connections');
      } finally {
        for (const h of held) await client.tcpClose(h.handle).catch(() => undefined);
        putSlice('web-1', ready('be-b', 'be-c'));
      }
      await waitServiceBackends(scene!.node, { ip: VIP, port: 80 }, active('be-b', 'be-c'), FOLLOW_MS);
    });

    test(title('a NodePort Service answers an outside host on the node\'s address'), {}, async () => {
      scene!.fake.create('services', serviceObject(NS, named('web-np'), { type: 'NodePort', clusterIP: VIP_NODEPORT, selector: { app: 'backend' }, ports: [{ name: 'http', port: 80, targetPort: TCP_PORT, nodePort: NODE_PORT_V }] }));
      scene!.fake.create('endpointslices', endpointSliceObject(NS, named('web-np-1'), named('web-np'), scene!.nodeName, ready('be-a', 'be-c'), SLICE_PORTS, v));
      await waitServiceBackends(scene!.node, { ip: VIP_NODEPORT, port: 80 }, active('be-a', 'be-c'), FOLLOW_MS);
      const deadline = Date.now() + FOLLOW_MS;
      let sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_V }, { count: 20, requests: 1, concurrency: 5 });
      // The NodePort frontend may follow the ClusterIP's by a moment.
      while (sessions.some((s) => s.outcome !== 'open') && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
        sessions = await scene!.agent('outside').tcpSessions({ dst: OUTSIDE_NODE_IP, port: NODE_PORT_V }, { count: 20, requests: 1, concurrency: 5 });
      }
      await assertAllAnswered(scene!.node, sessions, `outside -> ${OUTSIDE_NODE_IP}:${NODE_PORT_V}`);
      assert.deepEqual(names(shareByBackend(sessions)), ['be-a', 'be-c'].map(backendKey));
    });

    test(title('ClientIP session affinity from the Service: every connection of a client reaches one backend'), async () => {
      scene!.fake.create('services', serviceObject(NS, named('sticky'), { clusterIP: VIP_STICKY, sessionAffinity: 'ClientIP', selector: { app: 'backend' }, ports: [{ name: 'http', port: 80, targetPort: TCP_PORT }] }));
      scene!.fake.create('endpointslices', endpointSliceObject(NS, named('sticky-1'), named('sticky'), scene!.nodeName, ready('be-a', 'be-b', 'be-c'), SLICE_PORTS, v));
      await waitServiceBackends(scene!.node, { ip: VIP_STICKY, port: 80 }, active('be-a', 'be-b', 'be-c'), FOLLOW_MS);
      const [svc] = await servicesAt(scene!.node, VIP_STICKY, 80);
      assert.equal(svc!.flags.sessionAffinity, true, JSON.stringify(svc!.flags));
      assert.equal(svc!.flags.sessionAffinityTimeout, 10800);
      // One connection first: concurrent first connections of a client may each draw a backend before the affinity entry exists (as in Cilium).
      const first = await scene!.agent(backendKey('client')).tcpOnce({ dst: VIP_STICKY, port: 80 });
      assert.equal(first.outcome, 'open', JSON.stringify(first));
      const sessions = await scene!.agent(backendKey('client')).tcpSessions({ dst: VIP_STICKY, port: 80 }, { count: 20, requests: 1, concurrency: 4 });
      await assertAllAnswered(scene!.node, sessions, `client -> ${VIP_STICKY}:80`);
      const share = shareByBackend(sessions);
      assert.deepEqual([...share.keys()], [first.answers[0]!.name], `every connection on the first one's backend: ${JSON.stringify(Object.fromEntries(share))}`);
    });

    test(title('a LoadBalancer Service with an external IP: the outside host reaches it on the external IP, the ingress IP and the NodePort'), {}, async () => {
      scene!.fake.create('services', serviceObject(NS, named('web-lb'), { type: 'LoadBalancer', clusterIP: VIP_LB, externalIPs: [EXTERNAL_IP], loadBalancerIPs: [LB_INGRESS_IP], selector: { app: 'backend' }, ports: [{ name: 'http', port: 80, targetPort: TCP_PORT, nodePort: LB_NODE_PORT_V }] }));
      scene!.fake.create('endpointslices', endpointSliceObject(NS, named('web-lb-1'), named('web-lb'), scene!.nodeName, ready('be-b', 'be-c'), SLICE_PORTS, v));
      for (const ip of [VIP_LB, EXTERNAL_IP, LB_INGRESS_IP]) await waitServiceBackends(scene!.node, { ip, port: 80 }, active('be-b', 'be-c'), FOLLOW_MS);
      // IPv6: the NodePort on the node's IPv6 InternalIP, its address toward the outside host.
      const targets: Array<[string, number]> = [[EXTERNAL_IP, 80], [LB_INGRESS_IP, 80], [OUTSIDE_NODE_IP, LB_NODE_PORT_V]];
      for (const [dst, port] of targets) {
        const sessions = await scene!.agent('outside').tcpSessions({ dst, port }, { count: 20, requests: 1, concurrency: 5 });
        await assertAllAnswered(scene!.node, sessions, `outside -> ${dst}:${port}`);
        assert.deepEqual(names(shareByBackend(sessions)), ['be-b', 'be-c'].map(backendKey), `outside -> ${dst}:${port}`);
      }
    });

    test(title('a Service deleted from the API: its frontend is gone and its ClusterIP answers no more'), async () => {
      scene!.fake.delete('services', NS, named('web'));
      const deadline = Date.now() + FOLLOW_MS;
      while ((await servicesAt(scene!.node, VIP, 80)).length > 0) {
        if (Date.now() > deadline) throw new Error(`the agent still holds ${VIP}:80 after the Service was deleted`);
        await new Promise((r) => setTimeout(r, 50));
      }
      const r = await scene!.agent(backendKey('client')).tcpOnce({ dst: VIP, port: 80 }, 500);
      assert.notEqual(r.outcome, 'open', `${VIP}:80 after the Service was deleted: ${JSON.stringify(r)}`);
    });
  }
}
