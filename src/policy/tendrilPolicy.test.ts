// tendril policies (CiliumNetworkPolicy shape): entities, CIDR sets, port
// ranges, deny precedence and the enforcement modes.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { TestWorld, type Peer } from './testing/world.js';
import { Proto, type EnforcementMode } from './types.js';

const TNP = (name: string, spec: string, ns?: string) => `
apiVersion: tendril.io/v1
kind: ${ns === undefined ? 'TendrilClusterwideNetworkPolicy' : 'TendrilNetworkPolicy'}
metadata: {name: ${name}${ns === undefined ? '' : `, namespace: ${ns}`}}
spec:
${spec
  .split('\n')
  .map((l) => `  ${l}`)
  .join('\n')}
---
`;

function setup(mode: EnforcementMode = 'default') {
  const w = new TestWorld({ enforcementMode: mode });
  const web = w.pod('prod/web', { app: 'web' });
  const db = w.pod('prod/db', { app: 'db' });
  const devWeb = w.pod('dev/web', { app: 'web' });
  const remoteNode = w.identities.get(6)!;
  const health = w.identities.get(4)!;
  return { w, web, db, devWeb, remoteNode, health };
}

function expectFlow(w: TestWorld, src: Peer, dst: Peer, port: number, want: 'allow' | 'deny', proto: number = Proto.TCP): void {
  assert.equal(w.mapVerdict(src, dst, port, proto), want, `map state port ${port}`);
  assert.equal(w.traceVerdict(src, dst, port, proto), want, `trace port ${port}`);
}

describe('tendril policy rules', () => {
  test('fromEndpoints in a namespaced policy stays in that namespace', () => {
    const { w, web, db, devWeb } = setup();
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{matchLabels: {app: web}}]', 'prod'));
    expectFlow(w, web, db, 5432, 'allow');
    expectFlow(w, devWeb, db, 5432, 'deny');
  });

  test('a namespaced policy\'s endpointSelector never selects pods of another namespace, even naming its label', () => {
    const { w, web, db, devWeb } = setup();
    w.import(TNP('escape', 'endpointSelector: {matchExpressions: [{key: k8s:io.kubernetes.pod.namespace, operator: Exists}]}\ningressDeny:\n- fromEntities: [all]', 'dev'));
    expectFlow(w, web, db, 5432, 'allow');
    expectFlow(w, web, devWeb, 80, 'deny');
    w.import(TNP('escape', 'endpointSelector: {matchLabels: {k8s:io.kubernetes.pod.namespace: prod}}\ningressDeny:\n- fromEntities: [all]', 'dev'));
    expectFlow(w, web, db, 5432, 'allow');
  });

  test('cluster-wide fromEndpoints spans namespaces; naming the namespace label narrows it', () => {
    const { w, web, db, devWeb } = setup();
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{matchLabels: {app: web}}]'));
    expectFlow(w, web, db, 5432, 'allow');
    expectFlow(w, devWeb, db, 5432, 'allow');
    w.import(
      TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{matchLabels: {app: web, k8s:io.kubernetes.pod.namespace: dev}}]'),
    );
    expectFlow(w, web, db, 5432, 'deny');
    expectFlow(w, devWeb, db, 5432, 'allow');
  });

  test('an empty fromEndpoints selector in a cluster-wide policy means every pod, not the world', () => {
    const { w, web, db, devWeb, remoteNode } = setup();
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{}]'));
    expectFlow(w, web, db, 80, 'allow');
    expectFlow(w, devWeb, db, 80, 'allow');
    expectFlow(w, w.world, db, 80, 'deny');
    expectFlow(w, remoteNode, db, 80, 'deny');
    w.apply(w.engine.deletePolicies({ kind: 'TendrilClusterwideNetworkPolicy', name: 'db' }).regenerations);
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{}]', 'prod'));
    expectFlow(w, devWeb, db, 80, 'deny');
    expectFlow(w, web, db, 80, 'allow');
  });

  test('entities: world, cluster, host, remote-node, health, all', () => {
    const { w, web, db, remoteNode, health } = setup();
    w.import(TNP('web', 'endpointSelector: {matchLabels: {app: web}}\ningress:\n- fromEntities: [world]\n  toPorts: [{ports: [{port: "443", protocol: TCP}]}]\n- fromEntities: [remote-node, health]'));
    expectFlow(w, w.world, web, 443, 'allow');
    expectFlow(w, w.world, web, 80, 'deny');
    expectFlow(w, remoteNode, web, 80, 'allow');
    expectFlow(w, health, web, 4240, 'allow');
    expectFlow(w, db, web, 443, 'deny');
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\negress:\n- toEntities: [cluster]'));
    expectFlow(w, db, web, 80, 'deny'); // web's ingress still denies
    expectFlow(w, db, w.world, 80, 'deny');
    expectFlow(w, db, remoteNode, 80, 'allow');
    expectFlow(w, db, w.host, 80, 'allow');
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\negress:\n- toEntities: [all]'));
    expectFlow(w, db, w.world, 80, 'allow');
  });

  test('toCIDRSet with except and toCIDR', () => {
    const { w, web } = setup();
    w.import(
      TNP(
        'web',
        'endpointSelector: {matchLabels: {app: web}}\negress:\n- toCIDRSet: [{cidr: 10.0.0.0/8, except: [10.96.0.0/12]}]\n- toCIDR: [192.0.2.10/32]\n  toPorts: [{ports: [{port: "53", protocol: UDP}]}]',
      ),
    );
    expectFlow(w, web, w.external('10.1.2.3'), 80, 'allow');
    expectFlow(w, web, w.external('10.100.0.1'), 80, 'deny');
    expectFlow(w, web, w.external('192.0.2.10'), 53, 'allow', Proto.UDP);
    expectFlow(w, web, w.external('192.0.2.10'), 53, 'deny', Proto.TCP);
    expectFlow(w, web, w.external('8.8.8.8'), 80, 'deny');
  });

  test('port ranges and protocol ANY', () => {
    const { w, web, db } = setup();
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningress:\n- toPorts: [{ports: [{port: "8000", endPort: 8100}, {port: "53", protocol: UDP}]}]'));
    expectFlow(w, web, db, 7999, 'deny');
    expectFlow(w, web, db, 8000, 'allow');
    expectFlow(w, web, db, 8100, 'allow', Proto.UDP);
    expectFlow(w, web, db, 8100, 'allow', Proto.SCTP);
    expectFlow(w, web, db, 8101, 'deny');
    expectFlow(w, web, db, 53, 'allow', Proto.UDP);
    expectFlow(w, web, db, 53, 'deny', Proto.TCP);
  });

  test('an empty ingress rule enforces default deny and allows nothing', () => {
    const { w, web, db } = setup();
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningress:\n- {}'));
    expectFlow(w, web, db, 80, 'deny');
    expectFlow(w, w.host, db, 80, 'allow');
    expectFlow(w, db, web, 80, 'allow'); // egress untouched
  });
});

describe('deny precedence', () => {
  test('ingressDeny beats an allow of the same peer', () => {
    const { w, web, db, devWeb } = setup();
    w.import(
      TNP(
        'db',
        'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{matchLabels: {app: web}}]\ningressDeny:\n- fromEndpoints: [{matchLabels: {k8s:io.kubernetes.pod.namespace: dev}}]',
      ),
    );
    expectFlow(w, web, db, 5432, 'allow');
    expectFlow(w, devWeb, db, 5432, 'deny');
    const t = w.engine.trace({ endpoint: devWeb.endpointId }, { endpoint: db.endpointId }, Proto.TCP, 5432);
    assert.equal(t.ingress.reason, 'deny-rule');
    assert.deepEqual(t.ingress.decidingRules.map((r) => r.path), ['spec.ingressDeny[0]']);
  });

  test('a narrow deny inside a wide allow, and a wide deny over a narrow wildcard allow', () => {
    const { w, web, db } = setup();
    w.import(
      TNP(
        'db',
        'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{matchLabels: {app: web}}]\n- toPorts: [{ports: [{port: "9090", protocol: TCP}]}]\ningressDeny:\n- fromEndpoints: [{matchLabels: {app: web}}]\n  toPorts: [{ports: [{port: "9000", endPort: 9999, protocol: TCP}]}]',
      ),
    );
    expectFlow(w, web, db, 80, 'allow');
    expectFlow(w, web, db, 9500, 'deny');
    // the wildcard allow of 9090 is more specific than web's 9000–9999 deny, yet the deny wins
    expectFlow(w, web, db, 9090, 'deny');
    expectFlow(w, w.world, db, 9090, 'allow');
  });

  test('deny applies even where the direction is not enforced (enableDefaultDeny false)', () => {
    const { w, web, db, devWeb } = setup();
    w.import(
      TNP('db', 'endpointSelector: {matchLabels: {app: db}}\nenableDefaultDeny: {ingress: false}\ningressDeny:\n- fromEndpoints: [{matchLabels: {k8s:io.kubernetes.pod.namespace: dev}}]'),
    );
    expectFlow(w, web, db, 80, 'allow');
    expectFlow(w, devWeb, db, 80, 'deny');
  });

  test('a deny-only policy also turns on default deny (as in Cilium)', () => {
    const { w, web, db, devWeb } = setup();
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningressDeny:\n- fromEndpoints: [{matchLabels: {k8s:io.kubernetes.pod.namespace: dev}}]'));
    expectFlow(w, web, db, 80, 'deny');
    expectFlow(w, devWeb, db, 80, 'deny');
  });

  test('egressDeny to a CIDR inside an allowed world', () => {
    const { w, web } = setup();
    w.import(TNP('web', 'endpointSelector: {matchLabels: {app: web}}\negress:\n- toEntities: [world]\negressDeny:\n- toCIDR: [169.254.169.254/32]'));
    expectFlow(w, web, w.external('8.8.8.8'), 443, 'allow');
    expectFlow(w, web, w.external('169.254.169.254'), 80, 'deny');
  });

  test('deny from the host overrides allow-localhost', () => {
    const { w, db } = setup();
    w.import(TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningressDeny:\n- fromEntities: [host]\n  toPorts: [{ports: [{port: "22", protocol: TCP}]}]'));
    expectFlow(w, w.host, db, 22, 'deny');
    expectFlow(w, w.host, db, 80, 'allow');
  });
});

describe('enforcement modes', () => {
  const allowWeb = TNP('db', 'endpointSelector: {matchLabels: {app: db}}\ningress:\n- fromEndpoints: [{matchLabels: {app: web}}]\negressDeny:\n- toEntities: [world]');

  test('default: only selected endpoints, only named directions', () => {
    const { w, web, db, devWeb } = setup('default');
    w.import(allowWeb);
    expectFlow(w, web, db, 80, 'allow');
    expectFlow(w, devWeb, db, 80, 'allow');
    expectFlow(w, db, web, 80, 'deny'); // egressDeny puts db's egress into default deny
    expectFlow(w, web, devWeb, 80, 'allow'); // not selected: open
  });

  test('always: every endpoint is default-deny in both directions', () => {
    const { w, web, db, devWeb } = setup('always');
    expectFlow(w, web, devWeb, 80, 'deny');
    expectFlow(w, w.host, web, 80, 'allow'); // allow-localhost
    w.import(allowWeb + TNP('web-out', 'endpointSelector: {matchLabels: {app: web}}\negress:\n- toEntities: [all]'));
    expectFlow(w, web, db, 80, 'allow');
    expectFlow(w, db, web, 80, 'deny'); // db's egress: nothing allows it
    expectFlow(w, devWeb, web, 80, 'deny'); // dev/web's egress is default-deny too
  });

  test('never: nothing is enforced, not even deny rules', () => {
    const { w, web, db } = setup('never');
    w.import(allowWeb);
    expectFlow(w, db, w.world, 80, 'allow');
    expectFlow(w, w.world, db, 80, 'allow');
    expectFlow(w, web, db, 80, 'allow');
  });

  test('switching modes regenerates every endpoint', () => {
    const { w, web, db } = setup('default');
    w.import(allowWeb);
    const r = w.engine.setEnforcementMode('never');
    w.apply(r.regenerations);
    assert.ok(r.regenerations.some((x) => x.endpointId === db.endpointId));
    expectFlow(w, db, w.world, 80, 'allow');
    w.apply(w.engine.setEnforcementMode('always').regenerations);
    expectFlow(w, db, web, 80, 'deny');
  });
});
