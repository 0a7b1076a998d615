import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { dependsOnLocality, renderService, type RenderContext } from './render.js';
import type { ServiceFlags, ServiceSpec } from './types.js';
import { validateServiceSpec } from './validate.js';

/** Backend 10.0.0.N gets ID N; 10.0.0.1 and 10.0.0.2 are this node's. */
const ctx = (over: Partial<RenderContext> = {}): RenderContext => ({
  algorithm: 'random',
  maglevTableSize: 251,
  idOf: (key) => Number(/^10\.0\.0\.(\d+):/.exec(key)![1]),
  isLocal: (key) => key.startsWith('10.0.0.1:') || key.startsWith('10.0.0.2:'),
  ...over,
});

const svc = (flags: ServiceFlags, backends: ServiceSpec['backend-addresses'] = [1, 2, 3, 4].map((n) => ({ ip: `10.0.0.${n}`, port: 80 }))) =>
  validateServiceSpec(9, {
    'frontend-address': flags.type === 'NodePort' ? { ip: '0.0.0.0', port: 30080, protocol: 'TCP' } : { ip: '10.96.0.9', port: 80, protocol: 'TCP' },
    'backend-addresses': backends,
    flags,
  });

const scopes = (flags: ServiceFlags, backends?: ServiceSpec['backend-addresses'], c = ctx()) => {
  const e = renderService(svc(flags, backends), c);
  return { external: e.backendIds, internal: e.internalBackendIds, localTraffic: e.localTraffic };
};

describe('renderService traffic policies', () => {
  it('Cluster/Cluster: one scope with every backend', () => {
    assert.deepEqual(scopes({ type: 'NodePort' }), { external: [1, 2, 3, 4], internal: undefined, localTraffic: false });
  });

  it('external Local: this node\'s backends from outside, every backend from inside', () => {
    assert.deepEqual(scopes({ type: 'NodePort', trafficPolicy: 'Local' }), { external: [1, 2], internal: [1, 2, 3, 4], localTraffic: true });
  });

  it('internal Local: every backend from outside, this node\'s from inside', () => {
    for (const type of ['NodePort', 'ExternalIPs', 'LoadBalancer'] as const) {
      assert.deepEqual(scopes({ type, internalTrafficPolicy: 'Local' }), { external: [1, 2, 3, 4], internal: [1, 2], localTraffic: false }, type);
    }
  });

  it('both Local: one scope with this node\'s backends', () => {
    assert.deepEqual(scopes({ type: 'LoadBalancer', trafficPolicy: 'Local', internalTrafficPolicy: 'Local' }), { external: [1, 2], internal: undefined, localTraffic: true });
  });

  it('a ClusterIP (no traffic from outside) follows internalTrafficPolicy in its one scope', () => {
    assert.deepEqual(scopes({ type: 'ClusterIP', internalTrafficPolicy: 'Local' }), { external: [1, 2], internal: undefined, localTraffic: false });
    assert.deepEqual(scopes({ type: 'ClusterIP' }), { external: [1, 2, 3, 4], internal: undefined, localTraffic: false });
  });

  it('an empty Local scope is written empty (the datapath drops as NO_SERVICE), never widened to other nodes', () => {
    const remote = [3, 4].map((n) => ({ ip: `10.0.0.${n}`, port: 80 }));
    assert.deepEqual(scopes({ type: 'NodePort', internalTrafficPolicy: 'Local' }, remote), { external: [3, 4], internal: [], localTraffic: false });
    assert.deepEqual(scopes({ type: 'ClusterIP', internalTrafficPolicy: 'Local' }, remote), { external: [], internal: undefined, localTraffic: false });
  });

  it('a Local scope falls back to this node\'s terminating backends before it is empty, as kube-proxy does', () => {
    const backends: ServiceSpec['backend-addresses'] = [
      { ip: '10.0.0.1', port: 80, state: 'terminating' },
      { ip: '10.0.0.2', port: 80, state: 'maintenance' },
      { ip: '10.0.0.3', port: 80 },
    ];
    assert.deepEqual(scopes({ type: 'NodePort', internalTrafficPolicy: 'Local' }, backends), { external: [3], internal: [1], localTraffic: false });
    assert.deepEqual(scopes({ type: 'NodePort', trafficPolicy: 'Local' }, backends), { external: [1], internal: [3], localTraffic: true });
  });

  it('the Maglev table covers the external scope', () => {
    const e = renderService(svc({ type: 'NodePort', internalTrafficPolicy: 'Local' }), ctx({ algorithm: 'maglev' }));
    assert.deepEqual([...new Set(e.maglevTable)].sort(), [1, 2, 3, 4]);
    const both = renderService(svc({ type: 'NodePort', trafficPolicy: 'Local', internalTrafficPolicy: 'Local' }), ctx({ algorithm: 'maglev' }));
    assert.deepEqual([...new Set(both.maglevTable)].sort(), [1, 2]);
  });

  it('says which services follow endpoints\' locality', () => {
    assert.equal(dependsOnLocality(svc({ type: 'ClusterIP' })), false);
    assert.equal(dependsOnLocality(svc({ type: 'ClusterIP', internalTrafficPolicy: 'Local' })), true);
    assert.equal(dependsOnLocality(svc({ type: 'NodePort', trafficPolicy: 'Local' })), true);
  });
});
