import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { openBackend } from '../kvstore/factory.js';
import { createLogger } from '../logging/logger.js';
import { AgentMetrics, type AgentMetricsSources, cidrSize, countedBackend, countedCni, parseServeAddress } from './index.js';
import { metricTypes, sampleValue } from './testing/exposition.js';

/** Subsystem state as plain values the test changes between scrapes. */
function sourcesOf(state: { endpoints: string[]; allocations: Array<{ pool: string; family: 4 | 6 }>; revision: number; queue: number }): AgentMetricsSources {
  return {
    endpointStates: () => state.endpoints,
    identities: () => ({ reserved: 11, allocated: 2 }),
    ipamAllocations: async () => state.allocations,
    ipamPodCidrs: () => ['10.88.0.0/24', 'fd00:88::/120'],
    policyRevision: () => state.revision,
    deletionQueueDepth: async () => state.queue,
  };
}

describe('AgentMetrics', () => {
  test('names follow Prometheus conventions, with the declared types', async () => {
    const m = new AgentMetrics();
    m.bind(sourcesOf({ endpoints: [], allocations: [], revision: 1, queue: 0 }));
    const types = metricTypes(await m.render());
    const expected: Record<string, string> = {
      tendril_cni_operations_total: 'counter',
      tendril_cni_operation_duration_seconds: 'histogram',
      tendril_endpoint_regeneration_duration_seconds: 'histogram',
      tendril_kvstore_operations_total: 'counter',
      tendril_endpoint_state: 'gauge',
      tendril_identities: 'gauge',
      tendril_ipam_allocations: 'gauge',
      tendril_ipam_capacity: 'gauge',
      tendril_policy_revision: 'gauge',
      tendril_deletion_queue_depth: 'gauge',
      tendril_datapath_forwarded_packets_total: 'counter',
      tendril_datapath_dropped_packets_total: 'counter',
      tendril_datapath_conntrack_entries: 'gauge',
      tendril_datapath_map_pressure: 'gauge',
    };
    for (const [name, type] of Object.entries(expected)) assert.equal(types.get(name), type, name);
    for (const [name, type] of types) {
      assert.match(name, /^tendril_[a-z0-9_]+$/);
      if (type === 'counter') assert.match(name, /_total$/, name);
      if (type === 'histogram') assert.match(name, /_seconds$/, name);
    }
    assert.match(m.contentType, /^text\/plain; version=0\.0\.4/);
  });

  test('two agents in one process keep separate registries', async () => {
    const a = new AgentMetrics();
    const b = new AgentMetrics();
    a.observeCni('ADD', 'success', 0.01);
    assert.equal(sampleValue(await a.render(), 'tendril_cni_operations_total', { verb: 'ADD' }), 1);
    assert.equal(sampleValue(await b.render(), 'tendril_cni_operations_total', { verb: 'ADD' }), undefined);
  });

  test('CNI calls are counted and timed by verb and result; an unknown verb is "other"', async () => {
    const m = new AgentMetrics();
    const inner = {
      handle: async (req: { command: string; containerId?: string }) => {
        if (req.containerId === 'bad') throw new Error('refused');
        return { ok: true };
      },
    };
    const handler = countedCni(inner, m);
    await handler.handle({ command: 'ADD' });
    await handler.handle({ command: 'ADD' });
    await assert.rejects(handler.handle({ command: 'DEL', containerId: 'bad' }), /refused/);
    await handler.handle({ command: 'NOPE' });
    const text = await m.render();
    assert.equal(sampleValue(text, 'tendril_cni_operations_total', { verb: 'ADD', result: 'success' }), 2);
    assert.equal(sampleValue(text, 'tendril_cni_operations_total', { verb: 'DEL', result: 'error' }), 1);
    assert.equal(sampleValue(text, 'tendril_cni_operations_total', { verb: 'other', result: 'success' }), 1);
    assert.equal(sampleValue(text, 'tendril_cni_operation_duration_seconds_count', { verb: 'ADD', result: 'success' }), 2);
    assert.equal(sampleValue(text, 'tendril_cni_operation_duration_seconds_bucket', { verb: 'ADD', result: 'success', le: '+Inf' }), 2);
  });

  test('state is read at scrape: endpoints by state, IPAM by pool, capacity by CIDR, revision, queue depth', async () => {
    const m = new AgentMetrics();
    assert.equal(sampleValue(await m.render(), 'tendril_endpoint_state', { state: 'ready' }), undefined, 'nothing before bind');
    const state = { endpoints: ['ready', 'ready', 'not-ready'], allocations: [{ pool: 'default', family: 4 as const }, { pool: 'default', family: 4 as const }, { pool: 'v6', family: 6 as const }], revision: 7, queue: 3 };
    m.bind(sourcesOf(state));
    let text = await m.render();
    assert.equal(sampleValue(text, 'tendril_endpoint_state', { state: 'ready' }), 2);
    assert.equal(sampleValue(text, 'tendril_endpoint_state', { state: 'not-ready' }), 1);
    assert.equal(sampleValue(text, 'tendril_endpoint_state', { state: 'regenerating' }), 0, 'every state is present');
    assert.equal(sampleValue(text, 'tendril_identities', { type: 'reserved' }), 11);
    assert.equal(sampleValue(text, 'tendril_identities', { type: 'allocated' }), 2);
    assert.equal(sampleValue(text, 'tendril_ipam_allocations', { pool: 'default', family: 'ipv4' }), 2);
    assert.equal(sampleValue(text, 'tendril_ipam_allocations', { pool: 'v6', family: 'ipv6' }), 1);
    assert.equal(sampleValue(text, 'tendril_ipam_capacity', { cidr: '10.88.0.0/24' }), 256);
    assert.equal(sampleValue(text, 'tendril_ipam_capacity', { cidr: 'fd00:88::/120' }), 256);
    assert.equal(sampleValue(text, 'tendril_policy_revision'), 7);
    assert.equal(sampleValue(text, 'tendril_deletion_queue_depth'), 3);

    state.endpoints = ['ready'];
    state.allocations = [{ pool: 'default', family: 4 }];
    state.revision = 8;
    state.queue = 0;
    text = await m.render();
    assert.equal(sampleValue(text, 'tendril_endpoint_state', { state: 'ready' }), 1);
    assert.equal(sampleValue(text, 'tendril_endpoint_state', { state: 'not-ready' }), 0);
    assert.equal(sampleValue(text, 'tendril_ipam_allocations', { pool: 'default', family: 'ipv4' }), 1);
    assert.equal(sampleValue(text, 'tendril_ipam_allocations', { pool: 'v6', family: 'ipv6' }), undefined, 'an emptied pool is gone');
    assert.equal(sampleValue(text, 'tendril_policy_revision'), 8);
    assert.equal(sampleValue(text, 'tendril_deletion_queue_depth'), 0);
  });

  test('regenerations are timed by result', async () => {
    const m = new AgentMetrics();
    m.observeRegeneration('success', 0.003);
    m.observeRegeneration('error', 0.2);
    const text = await m.render();
    assert.equal(sampleValue(text, 'tendril_endpoint_regeneration_duration_seconds_count', { result: 'success' }), 1);
    assert.equal(sampleValue(text, 'tendril_endpoint_regeneration_duration_seconds_bucket', { result: 'success', le: '0.005' }), 1);
    assert.equal(sampleValue(text, 'tendril_endpoint_regeneration_duration_seconds_bucket', { result: 'error', le: '0.1' }), 0);
    assert.equal(sampleValue(text, 'tendril_endpoint_regeneration_duration_seconds_count', { result: 'error' }), 1);
  });

  test('kvstore operations on a real embedded store are counted, errors apart', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tdl-metrics-kv-'));
    const m = new AgentMetrics();
    const backend = countedBackend(await openBackend({ kind: 'embedded', options: {}, dataDir: dir, logger: createLogger('tdl-metrics', 'silent') }), m);
    try {
      await backend.put('tdl/a', '1');
      await backend.put('tdl/b', '2');
      assert.equal((await backend.get('tdl/a'))?.value, '1');
      assert.equal((await backend.list('tdl/')).kvs.length, 2);
      await assert.rejects(backend.keepAlive('123456789'));
      const text = await m.render();
      assert.equal(sampleValue(text, 'tendril_kvstore_operations_total', { operation: 'put', result: 'success' }), 2);
      assert.equal(sampleValue(text, 'tendril_kvstore_operations_total', { operation: 'get', result: 'success' }), 1);
      assert.equal(sampleValue(text, 'tendril_kvstore_operations_total', { operation: 'list', result: 'success' }), 1);
      assert.equal(sampleValue(text, 'tendril_kvstore_operations_total', { operation: 'keepAlive', result: 'error' }), 1);
      assert.equal(backend.kind, 'embedded');
    } finally {
      await backend.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('helpers', () => {
  test('cidrSize', () => {
    assert.equal(cidrSize('10.0.0.0/24'), 256);
    assert.equal(cidrSize('10.0.0.7/32'), 1);
    assert.equal(cidrSize('fd00::/64'), 2 ** 64 > Number.MAX_SAFE_INTEGER ? Number.MAX_SAFE_INTEGER : 2 ** 64);
    assert.equal(cidrSize('nonsense'), 0);
  });

  test('parseServeAddress takes host:port, [v6]:port and :port, and says what is wrong otherwise', () => {
    assert.deepEqual(parseServeAddress('127.0.0.1:9962'), { host: '127.0.0.1', port: 9962 });
    assert.deepEqual(parseServeAddress('[::1]:9962'), { host: '::1', port: 9962 });
    assert.deepEqual(parseServeAddress(':9962'), { host: '', port: 9962 });
    assert.deepEqual(parseServeAddress('localhost:0'), { host: 'localhost', port: 0 });
    assert.throws(() => parseServeAddress('127.0.0.1'), /use host:port/);
    assert.throws(() => parseServeAddress('127.0.0.1:70000'), /above 65535/);
    assert.throws(() => parseServeAddress('::1:9962'), /use host:port/);
    assert.throws(() => parseServeAddress('[10.0.0.1]:80'), /not an IPv6 address/);
    assert.throws(() => parseServeAddress('bad host:80'), /neither an IP address nor a host name/);
  });
});
