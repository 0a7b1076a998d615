import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1Endpoint, V1EndpointSlice, V1Service } from '@kubernetes/client-node';
import { validateServiceSpec } from '../service/index.js';
import { endpointState, k8sServiceFrontends, specFrontendKey } from './k8sServices.js';

type SvcSpec = NonNullable<V1Service['spec']>;

const k8sService = (name: string, spec: Partial<SvcSpec>, status?: V1Service['status']): V1Service => ({
  metadata: { namespace: 'default', name },
  spec: { type: 'ClusterIP', clusterIP: '10.96.0.10', clusterIPs: ['10.96.0.10'], ports: [{ name: 'http', port: 80, protocol: 'TCP' }], ...spec },
  ...(status ? { status } : {}),
});

const endpoint = (ip: string, conditions: V1Endpoint['conditions'] = { ready: true, serving: true, terminating: false }): V1Endpoint => ({ addresses: [ip], conditions });

const slice = (name: string, endpoints: V1Endpoint[], ports: V1EndpointSlice['ports'] = [{ name: 'http', port: 8080, protocol: 'TCP' }], addressType = 'IPv4'): V1EndpointSlice => ({
  metadata: { namespace: 'default', name, labels: { 'kubernetes.io/service-name': name.replace(/-[a-z0-9]+$/, '') } },
  addressType,
  endpoints,
  ports,
});

/** frontend key → [backends as ip:port(state), flags] */
function summary(svc: V1Service, slices: V1EndpointSlice[], ipv6NodePortAddresses?: string[]) {
  const { specs, skipped } = k8sServiceFrontends(svc, slices, ipv6NodePortAddresses ? { ipv6NodePortAddresses } : {});
  // Every spec is one the service API takes.
  for (const s of specs) validateServiceSpec(40000, s);
  return {
    frontends: Object.fromEntries(specs.map((s) => [specFrontendKey(s), { backends: s['backend-addresses'].map((b) => `${b.ip}:${b.port}${b.state === 'active' ? '' : `(${b.state})`}`), flags: s.flags }])),
    skipped: skipped.map((x) => x.what),
  };
}

const cluster = { type: 'ClusterIP', internalTrafficPolicy: 'Cluster' };

describe('k8sServiceFrontends', () => {
  it('a multi-port ClusterIP: one frontend per port, backends matched by port name', () => {
    const svc = k8sService('web', { ports: [{ name: 'http', port: 80, protocol: 'TCP' }, { name: 'dns', port: 53, protocol: 'UDP' }] });
    const s = slice('web-abc', [endpoint('10.0.1.2'), endpoint('10.0.1.1')], [{ name: 'http', port: 8080, protocol: 'TCP' }, { name: 'dns', port: 5353, protocol: 'UDP' }]);
    assert.deepEqual(summary(svc, [s]), {
      frontends: {
        '10.96.0.10:80/TCP': { backends: ['10.0.1.1:8080', '10.0.1.2:8080'], flags: cluster },
        '10.96.0.10:53/UDP': { backends: ['10.0.1.1:5353', '10.0.1.2:5353'], flags: cluster },
      },
      skipped: [],
    });
  });

  it('a Service labelled with another service proxy\'s name is left to that proxy', () => {
    const svc = { ...k8sService('web', {}), metadata: { namespace: 'default', name: 'web', labels: { 'service.kubernetes.io/service-proxy-name': 'other-proxy' } } };
    assert.deepEqual(summary(svc, [slice('web-abc', [endpoint('10.0.1.1')])]), { frontends: {}, skipped: ['the Service'] });
  });

  it('an unnamed slice port is the single unnamed service port; a port of another name or protocol is not', () => {
    const svc = k8sService('one', { ports: [{ port: 443 }] });
    assert.deepEqual(summary(svc, [slice('one-x', [endpoint('10.0.1.1')], [{ port: 8443 }])]).frontends['10.96.0.10:443/TCP']!.backends, ['10.0.1.1:8443']);
    assert.deepEqual(summary(svc, [slice('one-x', [endpoint('10.0.1.1')], [{ name: 'https', port: 8443 }])]).frontends['10.96.0.10:443/TCP']!.backends, []);
    assert.deepEqual(summary(svc, [slice('one-x', [endpoint('10.0.1.1')], [{ port: 8443, protocol: 'UDP' }])]).frontends['10.96.0.10:443/TCP']!.backends, []);
    assert.deepEqual(summary(svc, [slice('one-x', [endpoint('10.0.1.1')], [{}])]).frontends['10.96.0.10:443/TCP']!.backends, [], 'a slice port without a number');
  });

  it('NodePort: the ClusterIP and 0.0.0.0:nodePort; externalTrafficPolicy Local only on the latter', () => {
    const svc = k8sService('np', { type: 'NodePort', externalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80, nodePort: 30080 }] });
    const r = summary(svc, [slice('np-a', [endpoint('10.0.1.1')])]);
    assert.deepEqual(r.frontends, {
      '10.96.0.10:80/TCP': { backends: ['10.0.1.1:8080'], flags: cluster },
      '0.0.0.0:30080/TCP': { backends: ['10.0.1.1:8080'], flags: { type: 'NodePort', trafficPolicy: 'Local', internalTrafficPolicy: 'Cluster' } },
    });
  });

  it('LoadBalancer: the NodePort and each ingress IP, IPv6 too (not a hostname, not ipMode Proxy)', () => {
    const svc = k8sService('lb', { type: 'LoadBalancer', ports: [{ name: 'http', port: 80, nodePort: 31000 }] }, {
      loadBalancer: { ingress: [{ ip: '192.0.2.50' }, { hostname: 'lb.example' }, { ip: '192.0.2.51', ipMode: 'Proxy' }, { ip: '2001:db8::5' }] },
    });
    const r = summary(svc, [slice('lb-a', [endpoint('10.0.1.1')])]);
    assert.deepEqual(Object.keys(r.frontends), ['10.96.0.10:80/TCP', '0.0.0.0:31000/TCP', '192.0.2.50:80/TCP', '2001:db8::5:80/TCP']);
    assert.deepEqual(r.frontends['192.0.2.50:80/TCP']!.flags, { type: 'LoadBalancer', internalTrafficPolicy: 'Cluster' });
    assert.deepEqual(r.frontends['2001:db8::5:80/TCP']!.backends, [], 'an IPv6 address takes the IPv6 slices\' backends (none here)');
    assert.deepEqual(r.skipped, ['loadBalancer ingress 192.0.2.51']);
    // loadBalancerSourceRanges: on the LoadBalancer frontends of their family only (host bits cleared, as Kubernetes reads them); a family without any takes every source.
    const ranged = k8sService('lb', { type: 'LoadBalancer', loadBalancerSourceRanges: ['203.0.113.7/24', ' 198.51.100.0/25', '2001:db8:1::/48', 'nope'], ports: [{ name: 'http', port: 80, nodePort: 31000 }] }, { loadBalancer: { ingress: [{ ip: '192.0.2.50' }, { ip: '2001:db8::5' }] } });
    const rr = summary(ranged, []);
    assert.deepEqual(rr.frontends['192.0.2.50:80/TCP']!.flags, { type: 'LoadBalancer', internalTrafficPolicy: 'Cluster', sourceRanges: ['203.0.113.0/24', '198.51.100.0/25'] });
    assert.deepEqual(rr.frontends['2001:db8::5:80/TCP']!.flags, { type: 'LoadBalancer', internalTrafficPolicy: 'Cluster', sourceRanges: ['2001:db8:1::/48'] });
    assert.deepEqual(rr.frontends['0.0.0.0:31000/TCP']!.flags, { type: 'NodePort', internalTrafficPolicy: 'Cluster' }, 'the NodePort takes every source, as with kube-proxy');
    assert.deepEqual(rr.skipped, ['loadBalancerSourceRanges nope']);
    const v4only = k8sService('lb', { type: 'LoadBalancer', loadBalancerSourceRanges: ['203.0.113.0/24'] }, { loadBalancer: { ingress: [{ ip: '2001:db8::5' }] } });
    assert.equal(summary(v4only, []).frontends['2001:db8::5:80/TCP']!.flags.sourceRanges, undefined);
    // allocateLoadBalancerNodePorts false: no node port, no NodePort frontend.
    const noNp = k8sService('lb', { type: 'LoadBalancer', allocateLoadBalancerNodePorts: false }, { loadBalancer: { ingress: [{ ip: '192.0.2.50' }] } });
    assert.deepEqual(Object.keys(summary(noNp, []).frontends), ['10.96.0.10:80/TCP', '192.0.2.50:80/TCP']);
    // The status of a ClusterIP Service is no frontend.
    assert.deepEqual(Object.keys(summary(k8sService('c', {}, { loadBalancer: { ingress: [{ ip: '192.0.2.50' }] } }), []).frontends), ['10.96.0.10:80/TCP']);
  });

  it('externalIPs: one frontend each on the service port, with externalTrafficPolicy', () => {
    const svc = k8sService('ext', { externalIPs: ['198.51.100.7', 'fd00::7'], externalTrafficPolicy: 'Local' });
    const r = summary(svc, [slice('ext-a', [endpoint('fd00:10::1')], undefined, 'IPv6')]);
    assert.deepEqual(r.frontends['198.51.100.7:80/TCP'], { backends: [], flags: { type: 'ExternalIPs', trafficPolicy: 'Local', internalTrafficPolicy: 'Cluster' } });
    assert.deepEqual(r.frontends['fd00::7:80/TCP'], { backends: ['fd00:10::1:8080'], flags: { type: 'ExternalIPs', trafficPolicy: 'Local', internalTrafficPolicy: 'Cluster' } });
    assert.deepEqual(r.skipped, []);
  });

  it('sessionAffinity ClientIP with its timeout (Kubernetes\' default 10800)', () => {
    const withTimeout = summary(k8sService('a', { sessionAffinity: 'ClientIP', sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } } }), []);
    assert.deepEqual(withTimeout.frontends['10.96.0.10:80/TCP']!.flags, { ...cluster, sessionAffinity: true, sessionAffinityTimeout: 60 });
    const byDefault = summary(k8sService('a', { sessionAffinity: 'ClientIP' }), []);
    assert.deepEqual(byDefault.frontends['10.96.0.10:80/TCP']!.flags, { ...cluster, sessionAffinity: true, sessionAffinityTimeout: 10800 });
    assert.deepEqual(summary(k8sService('a', { sessionAffinity: 'None' }), []).frontends['10.96.0.10:80/TCP']!.flags, cluster);
  });

  it('both traffic policies Local: internal on every frontend, external on those reached from outside', () => {
    const svc = k8sService('both', { type: 'NodePort', externalTrafficPolicy: 'Local', internalTrafficPolicy: 'Local', ports: [{ name: 'http', port: 80, nodePort: 30081 }] });
    const r = summary(svc, []);
    assert.deepEqual(r.frontends['10.96.0.10:80/TCP']!.flags, { type: 'ClusterIP', internalTrafficPolicy: 'Local' });
    assert.deepEqual(r.frontends['0.0.0.0:30081/TCP']!.flags, { type: 'NodePort', trafficPolicy: 'Local', internalTrafficPolicy: 'Local' });
  });

  it('endpoint conditions: ready → active, serving and terminating → terminating, else no backend', () => {
    assert.equal(endpointState(endpoint('10.0.0.1', { ready: true })), 'active');
    assert.equal(endpointState(endpoint('10.0.0.1', {})), 'active', 'ready unset means ready');
    assert.equal(endpointState(endpoint('10.0.0.1', { ready: false, serving: true, terminating: true })), 'terminating');
    assert.equal(endpointState(endpoint('10.0.0.1', { ready: false, serving: false, terminating: true })), undefined);
    assert.equal(endpointState(endpoint('10.0.0.1', { ready: false, serving: true, terminating: false })), undefined, 'serving but not terminating: not ready yet');
    assert.equal(endpointState(endpoint('10.0.0.1', { ready: false })), undefined);
    const r = summary(k8sService('t', {}), [slice('t-a', [endpoint('10.0.1.1'), endpoint('10.0.1.2', { ready: false, serving: true, terminating: true }), endpoint('10.0.1.3', { ready: false })])]);
    assert.deepEqual(r.frontends['10.96.0.10:80/TCP']!.backends, ['10.0.1.1:8080', '10.0.1.2:8080(terminating)']);
  });

  it('slices: added and removed ones change the backends; duplicates collapse to the more serving; an IPv4 frontend reads no IPv6 or FQDN slice', () => {
    const svc = k8sService('s', {});
    const a = slice('s-a', [endpoint('10.0.1.1'), endpoint('10.0.1.2', { ready: false, serving: true, terminating: true })]);
    const b = slice('s-b', [endpoint('10.0.1.3'), endpoint('10.0.1.2')]);
    const v6 = slice('s-c', [endpoint('fd00::1')], undefined, 'IPv6');
    const fqdn = slice('s-d', [endpoint('db.example')], undefined, 'FQDN');
    const backends = (slices: V1EndpointSlice[]) => summary(svc, slices).frontends['10.96.0.10:80/TCP']!.backends;
    assert.deepEqual(backends([a]), ['10.0.1.1:8080', '10.0.1.2:8080(terminating)']);
    assert.deepEqual(backends([a, b, v6, fqdn]), ['10.0.1.1:8080', '10.0.1.2:8080', '10.0.1.3:8080']);
    assert.deepEqual(backends([b, a]), backends([a, b]), 'slice order does not matter');
    assert.deepEqual(backends([b]), ['10.0.1.2:8080', '10.0.1.3:8080']);
    assert.deepEqual(backends([]), []);
  });

  it('headless and ExternalName Services have no frontend; SCTP ports are skipped', () => {
    assert.deepEqual(summary(k8sService('h', { clusterIP: 'None', clusterIPs: ['None'] }), [slice('h-a', [endpoint('10.0.1.1')])]), { frontends: {}, skipped: [] });
    assert.deepEqual(summary(k8sService('h6', { clusterIP: 'None', clusterIPs: ['None'], ipFamilies: ['IPv6'] }), [slice('h-a', [endpoint('fd00::1')], undefined, 'IPv6')]), { frontends: {}, skipped: [] });
    assert.deepEqual(summary(k8sService('x', { type: 'ExternalName', externalName: 'db.example', clusterIP: undefined, clusterIPs: undefined }), []), { frontends: {}, skipped: [] });
    const sctp = summary(k8sService('d', { ports: [{ name: 'http', port: 80 }, { name: 'sig', port: 3868, protocol: 'SCTP' }] }), []);
    assert.deepEqual(Object.keys(sctp.frontends), ['10.96.0.10:80/TCP']);
    assert.deepEqual(sctp.skipped, ['port sig 3868/SCTP']);
  });

  it('an IPv6-only Service: its ClusterIP with the IPv6 slices\' backends (canonical addresses); IPv4 slices are not its', () => {
    const svc = k8sService('v6', { clusterIP: 'fd00:96::0a', clusterIPs: ['fd00:96::0a'], ipFamilies: ['IPv6'], ipFamilyPolicy: 'SingleStack' });
    const v6 = slice('v6-a', [endpoint('fd00:10:0:0::2'), endpoint('fd00:10::1'), endpoint('10.0.1.9')], undefined, 'IPv6');
    const v4 = slice('v6-b', [endpoint('10.0.1.1')]);
    assert.deepEqual(summary(svc, [v4, v6]), { frontends: { 'fd00:96::a:80/TCP': { backends: ['fd00:10::1:8080', 'fd00:10::2:8080'], flags: cluster } }, skipped: [] });
  });

  it('a dual-stack Service is one service per family, each with its family\'s slices; the IPv6 NodePort on the node\'s IPv6 InternalIPs, skipped with a reason when it has none', () => {
    const svc = k8sService('d', {
      type: 'NodePort',
      clusterIPs: ['10.96.0.10', 'fd00:96::10'],
      ipFamilies: ['IPv4', 'IPv6'],
      ipFamilyPolicy: 'RequireDualStack',
      externalIPs: ['198.51.100.7', 'fd00:7::7'],
      ports: [{ name: 'http', port: 80, nodePort: 30080 }],
    });
    const r = summary(svc, [slice('d-a', [endpoint('10.0.1.1')]), slice('d-b', [endpoint('fd00:10::1')], undefined, 'IPv6')]);
    assert.deepEqual(
      Object.fromEntries(Object.entries(r.frontends).map(([k, v]) => [k, v.backends])),
      { '10.96.0.10:80/TCP': ['10.0.1.1:8080'], 'fd00:96::10:80/TCP': ['fd00:10::1:8080'], '0.0.0.0:30080/TCP': ['10.0.1.1:8080'], '198.51.100.7:80/TCP': ['10.0.1.1:8080'], 'fd00:7::7:80/TCP': ['fd00:10::1:8080'] },
    );
    assert.deepEqual(r.skipped, ['port http 80/TCP nodePort 30080 on IPv6']);
    // A node with IPv6 InternalIPs serves the IPv6 NodePort on each, with the IPv6 slices' backends.
    const on6 = summary(svc, [slice('d-a', [endpoint('10.0.1.1')]), slice('d-b', [endpoint('fd00:10::1')], undefined, 'IPv6')], ['fd00:1::5', 'fd00:2::5']);
    assert.deepEqual(
      Object.fromEntries(Object.entries(on6.frontends).filter(([, v]) => v.flags.type === 'NodePort').map(([k, v]) => [k, v.backends])),
      { '0.0.0.0:30080/TCP': ['10.0.1.1:8080'], 'fd00:1::5:30080/TCP': ['fd00:10::1:8080'], 'fd00:2::5:30080/TCP': ['fd00:10::1:8080'] },
    );
    assert.deepEqual(on6.skipped, []);
    // ipFamilies is what the Service has: an address of another family (an object mid-conversion) is not served.
    const single = summary(k8sService('s', { clusterIPs: ['10.96.0.10', 'fd00:96::10'], ipFamilies: ['IPv4'] }), []);
    assert.deepEqual(Object.keys(single.frontends), ['10.96.0.10:80/TCP']);
    assert.deepEqual(single.skipped, ['clusterIP fd00:96::10']);
  });
});
