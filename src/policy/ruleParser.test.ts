import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { PolicyErrorCode, PolicyParseError, PolicyValidationError } from './errors.js';
import { parsePolicyDocuments, parsePolicyText } from './ruleParser.js';

function issuesOf(text: string): string[] {
  try {
    parsePolicyText(text);
  } catch (err) {
    assert.ok(err instanceof PolicyValidationError, `expected PolicyValidationError, got ${String(err)}`);
    assert.equal(err.code, PolicyErrorCode.INVALID);
    return err.issues.map((i) => `${i.document}:${i.path}`);
  }
  assert.fail('expected the input to be rejected');
}

const np = (spec: string, meta = 'name: p, namespace: prod') => `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {${meta}}
spec:
${spec}`;

describe('RuleParser', () => {
  test('multi-document YAML, a JSON array and a List', () => {
    const yaml = `${np('  podSelector: {}')}\n---\n${np('  podSelector: {}', 'name: q')}\n---\n`;
    const ps = parsePolicyText(yaml);
    assert.deepEqual(
      ps.map((p) => `${p.name.kind}/${p.name.namespace}/${p.name.name}`),
      ['NetworkPolicy/prod/p', 'NetworkPolicy/default/q'],
    );
    const json = JSON.stringify([
      { apiVersion: 'tendril.io/v1', kind: 'TendrilClusterwideNetworkPolicy', metadata: { name: 'c' }, spec: { endpointSelector: {} } },
      { kind: 'List', items: [{ apiVersion: 'cilium.io/v2', kind: 'CiliumNetworkPolicy', metadata: { name: 'n', namespace: 'x' }, specs: [{ endpointSelector: {} }, { endpointSelector: {} }] }] },
    ]);
    const qs = parsePolicyText(json);
    assert.equal(qs.length, 2);
    assert.equal(qs[0]!.name.namespace, '');
    assert.equal(qs[1]!.name.kind, 'TendrilNetworkPolicy');
    assert.equal(qs[1]!.rules.length, 2);
    assert.equal(parsePolicyDocuments([JSON.parse(json)]).length, 2);
  });

  test('NetworkPolicy defaults: policyTypes from the sections present', () => {
    const [p] = parsePolicyText(np('  podSelector: {}\n  egress: [{}]'));
    assert.equal(p!.rules[0]!.ingress.enforces, true);
    assert.equal(p!.rules[0]!.egress.enforces, true);
    const [q] = parsePolicyText(np('  podSelector: {}\n  egress: []'));
    assert.equal(q!.rules[0]!.egress.enforces, false);
  });

  test('errors point at the field', () => {
    const cases: Array<[string, string[]]> = [
      [np('  podSelector: {}\n  ingres: []'), ['0:spec.ingres']],
      [np('  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/33}}]}]'), ['0:spec.ingress[0].from[0].ipBlock.cidr']],
      [np('  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8, except: [11.0.0.0/16]}}]}]'), ['0:spec.ingress[0].from[0].ipBlock.except[0]']],
      [np('  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}, podSelector: {}}]}]'), ['0:spec.ingress[0].from[0]']],
      [np('  podSelector: {}\n  ingress: [{from: [{}]}]'), ['0:spec.ingress[0].from[0]']],
      [np('  podSelector: {}\n  egress: [{ports: [{port: 80, endPort: 70}]}]'), ['0:spec.egress[0].ports[0].endPort']],
      [np('  podSelector: {}\n  egress: [{ports: [{port: web-port-too-long-name, endPort: 90}]}]'), ['0:spec.egress[0].ports[0].port']],
      [np('  podSelector: {}\n  egress: [{ports: [{port: 70000}]}]'), ['0:spec.egress[0].ports[0].port']],
      [np('  podSelector: {}\n  egress: [{ports: [{protocol: ICMP}]}]'), ['0:spec.egress[0].ports[0].protocol']],
      [np('  podSelector: {matchExpressions: [{key: app, operator: In}]}'), ['0:spec.podSelector']],
      [np('  podSelector: {matchExpressions: [{key: app, operator: Maybe}]}'), ['0:spec.podSelector.matchExpressions[0].operator']],
      [np('  podSelector: {matchLabels: {app: "bad value!"}}'), ['0:spec.podSelector']],
      [np('  podSelector: {}', 'namespace: x'), ['0:metadata.name']],
      ['apiVersion: v1\nkind: Pod\nmetadata: {name: x}', ['0:kind']],
      [
        'apiVersion: tendril.io/v1\nkind: TendrilNetworkPolicy\nmetadata: {name: t}\nspec:\n  endpointSelector: {}\n  ingress: [{fromEntities: [moon]}]',
        ['0:spec.ingress[0].fromEntities[0]'],
      ],
      [
        'apiVersion: tendril.io/v1\nkind: TendrilNetworkPolicy\nmetadata: {name: t}\nspec:\n  endpointSelector: {}\n  egressDeny: [{toCIDRSet: [{cidr: 10.0.0.0/8, except: [10.0.0.0/8]}]}]',
        ['0:spec.egressDeny[0].toCIDRSet[0].except[0]'],
      ],
      [
        'apiVersion: tendril.io/v1\nkind: TendrilNetworkPolicy\nmetadata: {name: t}\nspec:\n  endpointSelector: {}\n  ingress: [{toPorts: [{ports: [{port: "80", protocol: TCP}], rules: {http: []}}]}]',
        ['0:spec.ingress[0].toPorts[0].rules'],
      ],
      ['apiVersion: tendril.io/v1\nkind: TendrilNetworkPolicy\nmetadata: {name: t}', ['0:spec']],
      ['apiVersion: tendril.io/v1\nkind: TendrilClusterwideNetworkPolicy\nmetadata: {name: t, namespace: x}\nspec: {endpointSelector: {}}', ['0:metadata.namespace']],
    ];
    for (const [text, want] of cases) assert.deepEqual(issuesOf(text), want, text);
  });

  test('every problem of every document is reported, and the import is all-or-nothing', () => {
    const text = `${np('  podSelector: {}')}\n---\n${np('  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: nope}}]}]', 'name: q')}\n---\n${np('  podSelector: {}\n  egres: []', 'name: r')}`;
    assert.deepEqual(issuesOf(text), ['1:spec.ingress[0].from[0].ipBlock.cidr', '2:spec.egres']);
    assert.deepEqual(issuesOf(`${np('  podSelector: {}')}\n---\n${np('  podSelector: {}')}`), ['1:metadata.name']);
  });

  test('YAML syntax errors are PolicyParseError with the document and line', () => {
    assert.throws(
      () => parsePolicyText('a: b\n---\nkind: [unclosed\n'),
      (err: unknown) => {
        assert.ok(err instanceof PolicyParseError);
        assert.equal(err.code, PolicyErrorCode.PARSE);
        assert.equal(err.document, 1);
        assert.equal(err.line, 4);
        return true;
      },
    );
  });

  test('empty documents are skipped', () => {
    assert.deepEqual(parsePolicyText('---\n---\n'), []);
  });
});

describe('JSON policy text', () => {
  const doc = (name: string, port: number) => ({
    apiVersion: 'tendril.io/v1',
    kind: 'TendrilNetworkPolicy',
    metadata: { name, namespace: 'prod' },
    spec: { endpointSelector: { matchLabels: { app: 'db' } }, ingress: [{ fromEndpoints: [{ matchLabels: { app: 'web' } }], toPorts: [{ ports: [{ port: String(port), protocol: 'TCP' }] }] }] },
  });
  const errorOf = (f: () => unknown): string => {
    try {
      f();
    } catch (err) {
      return (err as Error).message;
    }
    return 'no error';
  };

  test('documents between --- lines give what the YAML parser gives for the same text, numbered alike', () => {
    const text = ['---', JSON.stringify(doc('a', 5432)), '---', '', '---', JSON.stringify(doc('b', 5433), null, 2), '---', ''].join('\n');
    // A comment makes the text YAML only: the same documents through the YAML parser.
    assert.deepEqual(parsePolicyText(text), parsePolicyText(`# yaml\n${text}`));
    assert.deepEqual(parsePolicyText(text).map((p) => p.name.name), ['a', 'b']);
    // Errors name the same document either way (the empty one between counts).
    const bad = text.replace('"5433"', '"99999"');
    assert.equal(errorOf(() => parsePolicyText(bad)), errorOf(() => parsePolicyText(`# yaml\n${bad}`)));
    assert.match(errorOf(() => parsePolicyText(bad)), /^document 2\b/);
  });

  test('JSON the YAML parser would refuse is refused as it refuses it: a repeated key, a syntax error, nesting past the limit', () => {
    const twice = '{"apiVersion": "tendril.io/v1", "kind": "TendrilNetworkPolicy", "kind": "TendrilNetworkPolicy"}';
    assert.equal(errorOf(() => parsePolicyText(twice)), errorOf(() => parsePolicyText(`${twice}\n# yaml`)));
    assert.match(errorOf(() => parsePolicyText(twice)), /unique/i);
    assert.match(errorOf(() => parsePolicyText('{"kind": ')), /document 0/);
    assert.match(errorOf(() => parsePolicyText(`${'['.repeat(100)}${']'.repeat(100)}`)), /nested deeper than 64 levels/);
  });
});
