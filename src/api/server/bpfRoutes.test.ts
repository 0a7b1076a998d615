// /v1/bpf/* and /v1/monitor served by the agent's server (responses checked
// against api/openapi.yaml) over real maps pinned in a bpffs directory of the
// test's own, with labels and rule cookies resolved by a real agent (fake
// datapath) holding a real policy.
import assert from 'node:assert/strict';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { requireRoot } from '../../../test/support/root.js';
import { AgentClient, AgentResponseError } from '../../client/agentClient.js';
import { DropReason, EventType, PolicyVerdict, TrafficDirection } from '../../datapath/bpf/constants.js';
import { datapathEvent, type DatapathEvent } from '../../datapath/bpf/layout.js';
import { ruleCookie } from '../../datapath/bpf/ruleCookie.js';
import { type TestDatapathMaps } from '../../datapath/bpf/testing/inspectMaps.js';
import { encode } from '../../datapath/kernel/bpf/codec.js';
import { parseIp, parsePrefix } from '../../netip/index.js';
import type { MonitorEvent } from '../../monitor/index.js';
import { BpfObservability } from '../../agent/bpfObservability.js';
import { type BpfApiServer, startBpfApiServer } from '../../agent/testing/bpfApiServer.js';
import { type AgentApi, buildServer, listenOnSocket } from './server.js';

requireRoot('the bpf route tests');

let server: BpfApiServer;
let maps: TestDatapathMaps;
let obs: BpfObservability;
let app: FastifyInstance;
let dir: string;
let client: AgentClient;
let api: AgentApi;

const WORLD = 2;

before(async () => {
  server = await startBpfApiServer({ nodeName: 'tdl-bpfapi', podCidr: '10.91.0.0/24' });
  ({ maps, app, api } = server);
  obs = server.observability;
  dir = dirname(server.socket);
  client = new AgentClient({ socketPath: server.socket, timeoutMs: 10_000 });
});

after(() => server?.stop());

function event(over: Partial<DatapathEvent>): Buffer {
  return encode(datapathEvent, {
    type: EventType.DROP,
    subtype: Math.abs(DropReason.POLICY.code),
    direction: TrafficDirection.INGRESS,
    proto: 6,
    tcpFlags: 2,
    service: 0,
    ifindex: 1,
    srcIdentity: WORLD,
    dstIdentity: 0,
    srcEndpoint: 0,
    dstEndpoint: 7,
    cookie: 0,
    origLen: 60,
    sport: 33000,
    dport: 5432,
    saddr: parseIp('192.0.2.1'),
    daddr: parseIp('10.91.0.7'),
    tsNs: process.hrtime.bigint(),
    ...over,
  });
}

async function until(cond: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe('/v1/bpf', () => {
  test('endpoints and ipcache: decoded, with identity labels and interface names', async () => {
    maps.endpoints.set(parseIp('10.91.0.7'), { ifindex: 1, identity: WORLD, endpointId: 7, flags: 0, lxcMac: '02:00:00:00:00:07', podMac: '0a:00:00:00:00:07' });
    maps.ipcache.set(parsePrefix('0.0.0.0/0'), { identity: WORLD, tunnelIp4: 0, flags: 0 });
    const eps = await client.listBpfEndpoints();
    assert.deepEqual(eps, [
      { ip: '10.91.0.7', endpointId: 7, identity: WORLD, identityLabels: ['reserved:world'], ifindex: 1, ifName: 'lo', lxcMac: '02:00:00:00:00:07', podMac: '0a:00:00:00:00:07', flags: 0, host: false },
    ]);
    assert.deepEqual(await client.listBpfIpcache(), [{ prefix: '0.0.0.0/0', identity: WORLD, identityLabels: ['reserved:world'], flags: 0 }]);
  });

  test('policy: an endpoint\'s entries with the rule each cookie stands for', async () => {
    const cookie = ruleCookie({ policy: 'NetworkPolicy/default/db-from-web', rule: 0, path: 'spec.ingress[0]' });
    maps.policy.set({ endpointId: 7, identity: WORLD, egress: false, proto: 6, port: 5432, portPrefixLen: 16 }, { cookie, deny: 0, l4PrefixBits: 24 });
    maps.policy.set({ endpointId: 7, identity: 0, egress: true, proto: 0, port: 0, portPrefixLen: 0 }, { cookie: 1, deny: 0, l4PrefixBits: 0 });
    maps.policy.set({ endpointId: 8, identity: 0, egress: true, proto: 0, port: 0, portPrefixLen: 0 }, { cookie: 2, deny: 0, l4PrefixBits: 0 });
    const r = await client.getBpfPolicy(7);
    assert.equal(r.endpointId, 7);
    assert.deepEqual(
      r.entries.map((e) => [e.direction, e.identity, e.identityLabels.join(','), e.proto, e.portFirst, e.portLast, e.action, e.rule.text]),
      [
        ['egress', 0, '', 0, 0, 65535, 'allow', 'not enforced'],
        ['ingress', WORLD, 'reserved:world', 6, 5432, 5432, 'allow', 'NetworkPolicy/default/db-from-web spec.ingress[0]'],
      ],
    );
    assert.deepEqual(r.entries[1]!.rule.origins, [{ policy: 'NetworkPolicy/default/db-from-web', rule: 0, path: 'spec.ingress[0]' }]);
    await assert.rejects(client.getBpfPolicy('pod-name:default:db'), (err: unknown) => err instanceof AgentResponseError && err.status === 400 && /endpoint number/.test(err.message));
  });

  test('conntrack: list (by endpoint), GC of expired entries, flush', async () => {
    const now = process.hrtime.bigint();
    const entry = (expiresNs: bigint, src: number, dst: number) => ({ expiresNs, packets: 1n, bytes: 60n, srcIdentity: WORLD, dstIdentity: WORLD, srcEndpoint: src, dstEndpoint: dst, revNatIndex: 0, tcpFlags: 2, flags: 0, backendId: 0, natAddr: parseIp('0.0.0.0'), natPort: 0 });
    const key = (sport: number, proto: number) => ({ saddr: parseIp('10.91.0.7'), daddr: parseIp('10.91.0.8'), sport, dport: 80, proto, flags: 0 });
    maps.ctTcp.set(key(1000, 6), entry(now + 60_000_000_000n, 7, 8));
    maps.ctTcp.set(key(1001, 6), entry(now - 1n, 7, 8));
    maps.ctAny.set(key(1002, 17), entry(now + 60_000_000_000n, 9, 0));
    assert.equal((await client.listBpfConntrack()).length, 3);
    assert.deepEqual((await client.listBpfConntrack({ endpoint: 9 })).map((r) => [r.table, r.sport]), [['any', 1002]]);
    const gc = await client.gcBpfConntrack();
    assert.deepEqual([gc.tcp, gc.any], [{ scanned: 2, removed: 1 }, { scanned: 1, removed: 0 }]);
    assert.deepEqual(gc.sample.map((r) => r.sport), [1001]);
    assert.deepEqual(await client.flushBpfConntrack(), { removed: { tcp: 1, any: 1 } });
    assert.deepEqual(await client.listBpfConntrack(), []);
  });

  test('metrics: named reasons, summed over CPUs', async () => {
    const cpus = (maps.metrics.valueCodec as unknown as { cpus: number }).cpus;
    maps.metrics.set({ reason: Math.abs(DropReason.POLICY_DENY.code), direction: TrafficDirection.INGRESS }, Array.from({ length: cpus }, () => ({ packets: 1n, bytes: 100n })));
    assert.deepEqual(await client.listBpfMetrics(), [{ reason: 181, reasonName: 'POLICY_DENY', direction: 'ingress', packets: cpus, bytes: 100 * cpus }]);
  });

  test('a map that is not pinned is a 409 naming it, not a 500', async () => {
    const broken = new BpfObservability({ pinDir: join(maps.bpffsRoot, 'tdl-nothing'), log: pino({ level: 'silent' }), identityLabels: () => undefined, policies: () => [], policyRevision: () => 0 });
    const app2 = buildServer({ ...api, monitor: broken.monitor, bpf: broken.bpf }, { validateResponses: true });
    try {
      for (const url of ['/v1/bpf/endpoints', '/v1/bpf/metrics', '/v1/monitor']) {
        const r = await app2.inject({ method: 'GET', url });
        assert.equal(r.statusCode, 409, `${url}: ${r.body}`);
        assert.match(r.json<{ message: string }>().message, /not pinned/);
      }
    } finally {
      await app2.close();
      await broken.stop();
    }
  });
});

describe('/v1/monitor', () => {
  test('streams resolved events that pass the filter as NDJSON; the reader runs only while the client is there', async () => {
    assert.equal(obs.monitor.stats().reading, false);
    const got: MonitorEvent[] = [];
    const abort = new AbortController();
    const streaming = client.monitorEvents({ type: ['drop', 'policy-verdict'], endpoint: 7 }, (e) => got.push(e), { signal: abort.signal });
    await until(() => obs.monitor.stats().subscribers === 1, 'the subscription');
    assert.equal(obs.monitor.stats().reading, true);
    const cookie = ruleCookie({ policy: 'NetworkPolicy/default/db-from-web', rule: 0, path: 'spec.ingress[0]' });
    obs.monitor.handleRecords([
      event({}),
      event({ type: EventType.TRACE, subtype: 1 }),
      event({ dstEndpoint: 99 }),
      event({ type: EventType.POLICY_VERDICT, subtype: PolicyVerdict.ALLOWED, cookie }),
    ]);
    await until(() => got.length >= 2, 'two events');
    assert.deepEqual(got.map((e) => e.type), ['drop', 'policy-verdict']);
    assert.equal(got[0]!.rule?.text, 'no rule allows (default deny)');
    assert.deepEqual(got[0]!.source, { identity: WORLD, labels: ['reserved:world'], ip: '192.0.2.1', port: 33000 });
    assert.equal(got[1]!.rule?.text, 'NetworkPolicy/default/db-from-web spec.ingress[0]');
    abort.abort();
    await streaming;
    await until(() => obs.monitor.stats().subscribers === 0, 'the client to be gone');
    await until(() => !obs.monitor.stats().reading, 'the reader to stop');
  });

  test('invalid filters are refused before anything streams', async () => {
    const r = await app.inject({ method: 'GET', url: '/v1/monitor?type=bogus' });
    assert.equal(r.statusCode, 400, r.body);
    const r2 = await app.inject({ method: 'GET', url: '/v1/monitor?endpoint=70000' });
    assert.equal(r2.statusCode, 400, r2.body);
  });

  test('closing the server ends open streams (it does not wait for the clients)', async () => {
    const app3 = buildServer({ ...api, monitor: obs.monitor, bpf: obs.bpf });
    const sock = join(dir, 'api3.sock');
    await listenOnSocket(app3, sock);
    const c = new AgentClient({ socketPath: sock });
    const streaming = c.monitorEvents({}, () => undefined);
    await until(() => obs.monitor.stats().subscribers === 1, 'the subscription');
    await app3.close();
    await streaming;
    await until(() => obs.monitor.stats().subscribers === 0 && !obs.monitor.stats().reading, 'the reader to stop');
  });
});
