import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ObjectSerializer } from '@kubernetes/client-node/dist/gen/models/ObjectSerializer.js';
import { parsePolicyDocuments, STAGED_ANNOTATION } from '../policy/index.js';
import { policyDocument } from './policyWatcher.js';

describe('policyDocument', () => {
  it("turns the client's NetworkPolicy model (fields such as `_from`, no apiVersion/kind) into the document the parser reads", () => {
    const wire = {
      metadata: {
        name: 'allow-web',
        namespace: 'shop',
        uid: '0b0b',
        resourceVersion: '42',
        creationTimestamp: '2026-01-01T00:00:00Z',
        labels: { owner: 'team-a' },
        managedFields: [{ manager: 'kubectl', operation: 'Apply' }],
      },
      spec: { podSelector: { matchLabels: { app: 'web' } }, policyTypes: ['Ingress'], ingress: [{ from: [{ namespaceSelector: {} }], ports: [{ port: 80 }] }] },
    };
    const model = ObjectSerializer.deserialize(wire, 'V1NetworkPolicy', '') as object;
    assert.ok(JSON.stringify(model).includes('_from'), 'the model spells the field differently');
    const doc = policyDocument(model, { apiVersion: 'networking.k8s.io/v1', kind: 'NetworkPolicy', model: 'V1NetworkPolicy' });
    assert.deepEqual(doc, {
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: 'allow-web', namespace: 'shop', labels: { owner: 'team-a' } },
      spec: wire.spec,
    });
    const [policy] = parsePolicyDocuments([doc]);
    assert.deepEqual(policy!.name, { kind: 'NetworkPolicy', namespace: 'shop', name: 'allow-web' });
  });

  it('keeps `specs` of a tendril policy and drops the namespace a cluster-wide object never has', () => {
    const obj = { apiVersion: 'tendril.io/v1', kind: 'TendrilClusterwideNetworkPolicy', metadata: { name: 'c', namespace: '', uid: 'x' }, specs: [{ endpointSelector: {} }] };
    const doc = policyDocument(obj, { apiVersion: 'tendril.io/v1', kind: 'TendrilClusterwideNetworkPolicy' });
    assert.deepEqual(doc, { apiVersion: 'tendril.io/v1', kind: 'TendrilClusterwideNetworkPolicy', metadata: { name: 'c' }, specs: [{ endpointSelector: {} }] });
    assert.equal(parsePolicyDocuments([doc]).length, 1);
  });

  it('keeps the staged annotation alone of the annotations: removing it from the object promotes the policy', () => {
    const obj = (annotations: Record<string, string>) => ({
      apiVersion: 'tendril.io/v1',
      kind: 'TendrilNetworkPolicy',
      metadata: { name: 'p', namespace: 'shop', annotations },
      spec: { endpointSelector: {}, ingress: [{}] },
    });
    const staged = policyDocument(obj({ [STAGED_ANNOTATION]: 'true', 'kubectl.kubernetes.io/last-applied-configuration': '{"a":1}' }), { apiVersion: 'tendril.io/v1', kind: 'TendrilNetworkPolicy' });
    assert.deepEqual((staged.metadata as { annotations?: unknown }).annotations, { [STAGED_ANNOTATION]: 'true' });
    assert.equal(parsePolicyDocuments([staged])[0]!.staged, true);
    const enforced = policyDocument(obj({ 'kubectl.kubernetes.io/last-applied-configuration': '{"a":1}' }), { apiVersion: 'tendril.io/v1', kind: 'TendrilNetworkPolicy' });
    assert.equal((enforced.metadata as { annotations?: unknown }).annotations, undefined);
    assert.equal(parsePolicyDocuments([enforced])[0]!.staged, undefined);
  });
});
