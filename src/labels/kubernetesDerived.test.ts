import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { LabelError, LabelErrorCode } from './errors.js';
import { isKubernetesDerivedKey, requireNotKubernetesDerived } from './kubernetesDerived.js';
import { parseLabel } from './label.js';
import { LabelSource } from './source.js';

/** The keys of the issue, in tendril's spelling and Cilium's, and capitalised (a key without '/' may hold capitals). */
const DERIVED_KEYS = [
  'io.kubernetes.pod.namespace',
  'io.tendril.k8s.namespace.labels.team',
  'io.tendril.k8s.namespace.labels.kubernetes.io/metadata.name',
  'io.tendril.k8s.policy.serviceaccount',
  'io.tendril.k8s.policy.cluster',
  'io.cilium.k8s.namespace.labels.team',
  'io.cilium.k8s.policy.serviceaccount',
  'io.cilium.k8s.policy.cluster',
  'IO.KUBERNETES.POD.NAMESPACE',
  'Io.Tendril.K8s.Namespace.Labels.team',
  'IO.CILIUM.K8S.POLICY.SERVICEACCOUNT',
];

describe('the keys Kubernetes derives', () => {
  for (const key of DERIVED_KEYS) {
    test(`${key} is derived`, () => assert.equal(isKubernetesDerivedKey(key), true));
  }

  for (const key of ['app', 'io.kubernetes.pod.name', 'io.tendril.policy.namespace', 'team', 'kubernetes.io/metadata.name', 'io.tendrilk8s.x', 'app.kubernetes.io/name']) {
    test(`${key} is a pod's own`, () => assert.equal(isKubernetesDerivedKey(key), false));
  }

  // Every source prefix the parser accepts, and none (each caller's default source).
  const spellings = (key: string) => [`${key}=trusted`, `k8s:${key}=trusted`, `container:${key}=trusted`, `unspec:${key}=trusted`, `any:${key}=trusted`, `k8s:${key}`];
  for (const text of DERIVED_KEYS.flatMap(spellings)) {
    test(`requireNotKubernetesDerived refuses ${text}, naming the key and the door`, () => {
      for (const fallback of [LabelSource.K8s, LabelSource.Container]) {
        const label = parseLabel(text, fallback);
        assert.throws(
          () => requireNotKubernetesDerived(label, 'CNI_ARGS TENDRIL_LABELS'),
          (err: unknown) =>
            err instanceof LabelError && err.code === LabelErrorCode.KEY_DERIVED && err.message.includes(`"${label.key}"`) && err.message.startsWith('CNI_ARGS TENDRIL_LABELS'),
        );
      }
    });
  }

  test('a pod\'s own labels pass', () => {
    for (const text of ['k8s:app=web', 'container:image=nginx', 'app=web', 'k8s:team=trusted']) requireNotKubernetesDerived(parseLabel(text, LabelSource.K8s), 'x');
  });
});
