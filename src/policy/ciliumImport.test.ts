// CiliumNetworkPolicy import: the L3/L4 subset is accepted as tendril policy;
// L7, DNS-name and other parts tendril does not enforce are refused, each at
// its own path with its own message, and any of them fails the whole import.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { PolicyErrorCode, PolicyValidationError, type PolicyIssue } from './errors.js';
import { parsePolicyDocuments, parsePolicyText } from './ruleParser.js';
import { PolicyKind } from './rule.js';
import { LabelSet } from '../labels/index.js';

const CNP = (spec: string, meta = 'name: web, namespace: prod') => `apiVersion: cilium.io/v2
kind: CiliumNetworkPolicy
metadata: {${meta}}
spec:
${spec
  .split('\n')
  .map((l) => `  ${l}`)
  .join('\n')}
`;

function rejected(text: string): readonly PolicyIssue[] {
  try {
    parsePolicyText(text);
  } catch (err) {
    assert.ok(err instanceof PolicyValidationError, `expected PolicyValidationError, got ${String(err)}`);
    assert.equal(err.code, PolicyErrorCode.INVALID);
    return err.issues;
  }
  assert.fail('expected the import to be refused');
}

describe('CiliumNetworkPolicy import', () => {
  test('an L3/L4 CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy are accepted', () => {
    const text = `${CNP(`endpointSelector: {matchLabels: {app: web}}
ingress:
- fromEndpoints: [{matchLabels: {app: frontend}}]
  toPorts: [{ports: [{port: "8080", protocol: TCP}, {port: "9000", endPort: 9010, protocol: UDP}]}]
- fromEntities: [host, remote-node]
- fromCIDRSet: [{cidr: 10.20.0.0/16, except: [10.20.1.0/24]}]
egress:
- toEndpoints: [{matchExpressions: [{key: app, operator: In, values: [db, cache]}]}]
  toPorts: [{ports: [{port: "5432"}]}]
- toCIDR: [192.0.2.0/24]
egressDeny:
- toEntities: [world]
  toPorts: [{ports: [{port: "25", protocol: TCP}]}]`)}---
apiVersion: cilium.io/v2
kind: CiliumClusterwideNetworkPolicy
metadata: {name: dns}
specs:
- description: every pod may reach kube-dns
  endpointSelector: {}
  egress:
  - toEndpoints: [{matchLabels: {k8s:io.kubernetes.pod.namespace: kube-system, k8s-app: kube-dns}}]
    toPorts: [{ports: [{port: "53", protocol: ANY}]}]
- endpointSelector: {matchLabels: {app: web}}
  enableDefaultDeny: {egress: false}
  egress:
  - toEntities: [world]
`;
    const [cnp, ccnp] = parsePolicyText(text);
    assert.deepEqual(cnp!.name, { kind: PolicyKind.TendrilNetworkPolicy, namespace: 'prod', name: 'web' });
    assert.equal(cnp!.rules.length, 1);
    const rule = cnp!.rules[0]!;
    assert.equal(rule.ingress.allow.length, 3);
    assert.deepEqual(rule.ingress.allow[0]!.ports, [
      { protocol: 'TCP', port: 8080, endPort: 8080 },
      { protocol: 'UDP', port: 9000, endPort: 9010 },
    ]);
    assert.equal(rule.egress.allow.length, 2);
    assert.equal(rule.egress.deny.length, 1);
    assert.deepEqual(ccnp!.name, { kind: PolicyKind.TendrilClusterwideNetworkPolicy, namespace: '', name: 'dns' });
    assert.equal(ccnp!.rules.length, 2);
    assert.equal(ccnp!.rules[1]!.egress.enforces, false);
  });

  // Each refused part: where it sits in an L3/L4-valid rule, and words its message must carry.
  const refusals: Array<[string, string, string, RegExp]> = [
    ['toPorts[].rules.http', 'ingress:\n- toPorts: [{ports: [{port: "80", protocol: TCP}], rules: {http: [{method: GET, path: /}]}}]', 'spec.ingress[0].toPorts[0].rules', /HTTP rules \(rules\.http\) are L7/],
    ['toPorts[].rules.kafka', 'ingress:\n- toPorts: [{ports: [{port: "9092", protocol: TCP}], rules: {kafka: [{topic: t}]}}]', 'spec.ingress[0].toPorts[0].rules', /Kafka rules \(rules\.kafka\) are L7/],
    ['toPorts[].rules.dns', 'egress:\n- toEntities: [cluster]\n  toPorts: [{ports: [{port: "53", protocol: ANY}], rules: {dns: [{matchPattern: "*"}]}}]', 'spec.egress[0].toPorts[0].rules', /DNS \(a DNS proxy\) rules \(rules\.dns\) are L7/],
    ['toPorts[].rules.l7proto', 'ingress:\n- toPorts: [{ports: [{port: "6379"}], rules: {l7proto: redis, l7: [{cmd: get}]}}]', 'spec.ingress[0].toPorts[0].rules', /L7 protocol parser rules \(rules\.l7proto\), generic L7 rules \(rules\.l7\) are L7/],
    ['toPorts[].terminatingTLS', 'egress:\n- toPorts: [{ports: [{port: "443"}], terminatingTLS: {secret: {name: s}}}]', 'spec.egress[0].toPorts[0].terminatingTLS', /TLS termination/],
    ['toPorts[].serverNames', 'egress:\n- toPorts: [{ports: [{port: "443"}], serverNames: [example.com]}]', 'spec.egress[0].toPorts[0].serverNames', /server-name/],
    ['toPorts[].listener', 'egress:\n- toPorts: [{ports: [{port: "443"}], listener: {envoyConfig: {kind: CiliumEnvoyConfig, name: e}, name: l}}]', 'spec.egress[0].toPorts[0].listener', /Envoy listeners/],
    ['toFQDNs', 'egress:\n- toFQDNs: [{matchName: api.example.com}]\n  toPorts: [{ports: [{port: "443"}]}]', 'spec.egress[0].toFQDNs', /DNS-name rules \(toFQDNs\).*toCIDR/],
    ['toServices', 'egress:\n- toServices: [{k8sService: {serviceName: db, namespace: prod}}]', 'spec.egress[0].toServices', /toServices.*toEndpoints/],
    ['toGroups', 'egress:\n- toGroups: [{aws: {securityGroupsIds: [sg-1]}}]', 'spec.egress[0].toGroups', /cloud-provider groups/],
    ['fromRequires', 'ingress:\n- fromEndpoints: [{}]\n  fromRequires: [{matchLabels: {env: prod}}]', 'spec.ingress[0].fromRequires', /fromRequires is not supported/],
    ['toRequires', 'egress:\n- toEndpoints: [{}]\n  toRequires: [{matchLabels: {env: prod}}]', 'spec.egress[0].toRequires', /toRequires is not supported/],
    ['icmps', 'ingress:\n- fromEntities: [world]\n  icmps: [{fields: [{type: 8, family: IPv4}]}]', 'spec.ingress[0].icmps', /ICMP type rules/],
    ['authentication', 'ingress:\n- fromEndpoints: [{}]\n  authentication: {mode: required}', 'spec.ingress[0].authentication', /mutual authentication/],
    ['fromNodes', 'ingress:\n- fromNodes: [{matchLabels: {role: worker}}]', 'spec.ingress[0].fromNodes', /fromEntities \[host, remote-node\]/],
    ['toNodes', 'egressDeny:\n- toNodes: [{}]', 'spec.egressDeny[0].toNodes', /node selectors \(toNodes\)/],
    ['cidrGroupRef', 'ingress:\n- fromCIDRSet: [{cidrGroupRef: office}]', 'spec.ingress[0].fromCIDRSet[0].cidrGroupRef', /CiliumCIDRGroup/],
    ['nodeSelector', 'ingress:\n- fromEntities: [world]', 'spec.nodeSelector', /host policies/],
  ];

  for (const [what, body, path, words] of refusals) {
    test(`${what} is refused at its path, saying tendril enforces L3/L4 only`, () => {
      const selector = what === 'nodeSelector' ? 'nodeSelector: {matchLabels: {role: worker}}' : 'endpointSelector: {matchLabels: {app: web}}';
      const issues = rejected(CNP(`${selector}\n${body}`));
      // Nothing else: no "unknown field", no "cidr is required" for the field taken out.
      assert.deepEqual(
        issues.map((i) => i.path),
        [path],
      );
      const issue = issues.find((i) => i.path === path)!;
      assert.match(issue.message, /tendril enforces L3\/L4 only/);
      assert.match(issue.message, words);
      assert.doesNotMatch(issue.message, /unknown field/);
    });
  }

  test('a mix reports every refused part and every other problem, across documents and specs; nothing is imported', () => {
    const text = `${CNP(`endpointSelector: {matchLabels: {app: web}}
ingress:
- fromEndpoints: [{matchLabels: {app: frontend}}]
  toPorts: [{ports: [{port: "80", protocol: TCP}], rules: {http: [{method: GET}]}}]
egress:
- toFQDNs: [{matchPattern: "*.example.com"}]
- toCIDR: [10.0.0.0/33]
- toPortz: []`)}---
apiVersion: cilium.io/v2
kind: CiliumClusterwideNetworkPolicy
metadata: {name: all}
specs:
- endpointSelector: {}
  egress:
  - toServices: [{k8sServiceSelector: {selector: {}}}]
- endpointSelector: {}
  ingress:
  - fromEntities: [world]
    icmps: [{fields: [{type: 8}]}]
`;
    const issues = rejected(text);
    assert.deepEqual(
      issues.map((i) => `${i.document}:${i.path}`).sort(),
      [
        '0:spec.egress[0].toFQDNs',
        '0:spec.egress[2].toPortz',
        '0:spec.ingress[0].toPorts[0].rules',
        '1:specs[0].egress[0].toServices',
        '1:specs[1].ingress[0].icmps',
      ].sort(),
    );
    assert.equal(issues.find((i) => i.path === 'spec.egress[2].toPortz')!.message, 'unknown field');
    // The error's message (what the CLI and the API print) lists every problem.
    const err = (() => {
      try {
        parsePolicyText(text);
      } catch (e) {
        return e as Error;
      }
      return undefined;
    })();
    assert.match(err!.message, /^5 problems:/);
    assert.match(err!.message, /document 1: specs\[1\]\.ingress\[0\]\.icmps: ICMP type rules/);
  });

  test('an invalid CIDR beside a refused field is still reported once the schema passes', () => {
    const issues = rejected(CNP('endpointSelector: {}\negress:\n- toCIDR: [10.0.0.0/33]\n  toPorts: [{ports: [{port: "53"}], rules: {dns: [{matchName: x}]}}]'));
    assert.deepEqual(issues.map((i) => i.path).sort(), ['spec.egress[0].toCIDR[0].cidr', 'spec.egress[0].toPorts[0].rules']);
  });

  test('API bodies (already parsed documents) are refused the same way', () => {
    assert.throws(
      () =>
        parsePolicyDocuments([
          { apiVersion: 'cilium.io/v2', kind: 'CiliumNetworkPolicy', metadata: { name: 'x' }, spec: { endpointSelector: {}, egress: [{ toFQDNs: [{ matchName: 'a.b' }] }] } },
        ]),
      (err: unknown) => err instanceof PolicyValidationError && err.issues.length === 1 && err.issues[0]!.path === 'spec.egress[0].toFQDNs',
    );
  });

  test('tendril.io/v1 kinds get the same messages', () => {
    const issues = rejected('apiVersion: tendril.io/v1\nkind: TendrilNetworkPolicy\nmetadata: {name: t}\nspec:\n  endpointSelector: {}\n  egress: [{toFQDNs: [{matchName: a.b}]}]\n');
    assert.deepEqual(issues.map((i) => i.path), ['spec.egress[0].toFQDNs']);
    assert.match(issues[0]!.message, /tendril enforces L3\/L4 only/);
  });

  test('Cilium\'s derived keys (service account, namespace labels) select what they selected under Cilium', () => {
    const [policy] = parsePolicyText(
      CNP(`endpointSelector: {matchLabels: {app: web}}
ingress:
- fromEndpoints: [{matchLabels: {io.cilium.k8s.policy.serviceaccount: api, k8s:io.cilium.k8s.namespace.labels.team: prod}}]`),
    );
    const peers = policy!.rules[0]!.ingress.allow[0]!.peers;
    assert.ok(peers !== 'all' && peers.length === 1);
    const pod = (extra: string[]) =>
      LabelSet.parse(['k8s:app=api', 'k8s:io.kubernetes.pod.namespace=prod', ...extra]);
    assert.equal(peers[0]!.matches(pod(['k8s:io.tendril.k8s.policy.serviceaccount=api', 'k8s:io.tendril.k8s.namespace.labels.team=prod'])), true, 'the pod running as that service account in that namespace');
    assert.equal(peers[0]!.matches(pod(['k8s:io.cilium.k8s.policy.serviceaccount=api', 'k8s:io.cilium.k8s.namespace.labels.team=prod'])), false, 'a pod carrying Cilium\'s keys as its own labels');
  });
});
