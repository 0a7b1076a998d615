/**
 * The agent's metrics end to end over the fake datapath: a CNI ADD and DEL
 * through the API socket change the CNI counter and the endpoint gauge as
 * scraped both from the socket (GET /v1/metrics) and from the TCP address
 * of --prometheus-serve-addr.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { AgentClient } from '../client/agentClient.js';
import { MetricsServeError } from '../metrics/index.js';
import { sampleValue } from '../metrics/testing/exposition.js';
import { ConfigError, defaultConfig, validateConfig } from './config.js';
import { type FakeNodeAgent, startFakeNodeAgent } from './testing/fakeNodeAgent.js';

const CONF = JSON.stringify({ cniVersion: '1.0.0', name: 'tdlmetrics', type: 'tendril-cni' });

let node: FakeNodeAgent;
let client: AgentClient;

beforeEach(async () => {
  node = await startFakeNodeAgent({ nodeName: 'tdl-metrics', podCidr: '10.89.0.0/24', config: { prometheusServeAddr: '127.0.0.1:0' } });
  client = new AgentClient({ socketPath: node.config.socket, timeoutMs: 10_000 });
});

afterEach(() => node.stop());

async function scrapeTcp(): Promise<{ text: string; contentType: string | null }> {
  const addr = node.agent.prometheusAddress;
  assert.ok(addr, 'the TCP metrics server is up');
  const res = await fetch(`http://127.0.0.1:${addr.port}/metrics`);
  assert.equal(res.status, 200);
  return { text: await res.text(), contentType: res.headers.get('content-type') };
}

function cni(command: 'ADD' | 'DEL', containerId: string, netns: string) {
  return client.cni({ command, containerId, netns, ifName: 'eth0', path: '/opt/cni/bin', args: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${containerId}`, config: CONF });
}

describe('GET /metrics', () => {
  test('a CNI ADD and DEL show in the CNI counter and the endpoint gauge, on the socket and on TCP', async () => {
    const netns = '/var/run/netns/tdlmetrics0';
    node.datapath.addNetns(netns);
    const before = await client.metrics();
    assert.equal(sampleValue(before, 'tendril_cni_operations_total', { verb: 'ADD', result: 'success' }), undefined);
    assert.equal(sampleValue(before, 'tendril_endpoint_state', { state: 'ready' }), 0);

    await cni('ADD', 'tdl-m1', netns);
    for (const text of [await client.metrics(), (await scrapeTcp()).text]) {
      assert.equal(sampleValue(text, 'tendril_cni_operations_total', { verb: 'ADD', result: 'success' }), 1);
      assert.equal(sampleValue(text, 'tendril_cni_operation_duration_seconds_count', { verb: 'ADD', result: 'success' }), 1);
      assert.equal(sampleValue(text, 'tendril_endpoint_state', { state: 'ready' }), 1);
      assert.ok((sampleValue(text, 'tendril_endpoint_regeneration_duration_seconds_count', { result: 'success' }) ?? 0) >= 1, 'the first regeneration was timed');
      // The router address and the pod's.
      assert.equal(sampleValue(text, 'tendril_ipam_allocations', { family: 'ipv4' }), 2);
      assert.equal(sampleValue(text, 'tendril_ipam_capacity', { cidr: '10.89.0.0/24' }), 256);
      assert.ok((sampleValue(text, 'tendril_kvstore_operations_total', { operation: 'txn', result: 'success' }) ?? 0) > 0, 'kvstore writes are counted');
      assert.equal(sampleValue(text, 'tendril_deletion_queue_depth'), 0);
    }

    await cni('DEL', 'tdl-m1', netns);
    const { text, contentType } = await scrapeTcp();
    assert.match(contentType ?? '', /^text\/plain; version=0\.0\.4/);
    assert.equal(sampleValue(text, 'tendril_cni_operations_total', { verb: 'DEL', result: 'success' }), 1);
    assert.equal(sampleValue(text, 'tendril_endpoint_state', { state: 'ready' }), 0);
    assert.equal(sampleValue(text, 'tendril_ipam_allocations', { family: 'ipv4' }), 1);
    assert.equal(sampleValue(await client.metrics(), 'tendril_endpoint_state', { state: 'ready' }), 0);
  });

  test('a refused CNI call is counted as an error', async () => {
    await assert.rejects(cni('ADD', 'tdl-m2', '/var/run/netns/tdlmetrics-none'));
    assert.equal(sampleValue(await client.metrics(), 'tendril_cni_operations_total', { verb: 'ADD', result: 'error' }), 1);
  });

  test('the TCP address serves only GET /metrics', async () => {
    const { port } = node.agent.prometheusAddress!;
    assert.equal((await fetch(`http://127.0.0.1:${port}/v1/endpoint`)).status, 404);
    assert.equal((await fetch(`http://127.0.0.1:${port}/metrics`, { method: 'POST' })).status, 405);
  });
});

describe('--prometheus-serve-addr at start', () => {
  test('a malformed address is refused with one line naming the flag', async () => {
    assert.throws(() => validateConfig({ ...defaultConfig(), podCidrs: ['10.89.1.0/24'], prometheusServeAddr: '127.0.0.1' }), (err: unknown) => {
      assert.ok(err instanceof ConfigError, String(err));
      assert.match(err.message, /prometheusServeAddr/);
      assert.doesNotMatch(err.message, /\n/);
      return true;
    });
  });

  test('an address already in use fails the start with LISTEN_FAILED', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      await assert.rejects(startFakeNodeAgent({ nodeName: 'tdl-metrics-busy', podCidr: '10.89.2.0/24', config: { prometheusServeAddr: `127.0.0.1:${port}` } }), (err: unknown) => {
        assert.ok(err instanceof MetricsServeError, String(err));
        assert.equal(err.code, 'LISTEN_FAILED');
        assert.match(err.message, new RegExp(`cannot serve metrics on 127\\.0\\.0\\.1:${port}: EADDRINUSE`));
        return true;
      });
    } finally {
      await new Promise<void>((resolve) => taken.close(() => resolve()));
    }
  });
});
