import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { V1Namespace, V1Pod } from '@kubernetes/client-node';
import { LabelSet } from '../labels/index.js';
import { parsePolicyText } from '../policy/index.js';
import { k8sPodLabels, type SkippedLabel } from './podLabels.js';

const pod = (labels: Record<string, string>, sa?: string): V1Pod => ({
  metadata: { namespace: 'shop', name: 'web-1', labels },
  spec: { containers: [{ name: 'c' }], ...(sa ? { serviceAccountName: sa } : {}) },
});
const ns = (labels: Record<string, string>): V1Namespace => ({ metadata: { name: 'shop', labels } });

describe('k8sPodLabels', () => {
  it('gives the namespace, pod labels, namespace labels under the tendril prefix and the service account', () => {
    const labels = k8sPodLabels(pod({ app: 'web', 'app.kubernetes.io/part-of': 'shop' }, 'web-sa'), ns({ team: 'a', 'kubernetes.io/metadata.name': 'shop' }));
    assert.deepEqual(labels.toStrings(), [
      'k8s:app=web',
      'k8s:app.kubernetes.io/part-of=shop',
      'k8s:io.kubernetes.pod.namespace=shop',
      'k8s:io.tendril.k8s.namespace.labels.kubernetes.io/metadata.name=shop',
      'k8s:io.tendril.k8s.namespace.labels.team=a',
      'k8s:io.tendril.k8s.policy.serviceaccount=web-sa',
    ]);
  });

  it('without the namespace object has the namespace label alone', () => {
    assert.deepEqual(k8sPodLabels(pod({ app: 'web' }), undefined).toStrings(), ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=shop']);
  });

  it('never lets a pod label claim another namespace or a derived key', () => {
    const skipped: SkippedLabel[] = [];
    const labels = k8sPodLabels(
      pod({
        app: 'web',
        'io.kubernetes.pod.namespace': 'kube-system',
        'io.tendril.k8s.namespace.labels.team': 'admin',
        'io.tendril.k8s.policy.serviceaccount': 'root',
        // Cilium's derived keys, which imported Cilium policies select on.
        'io.cilium.k8s.policy.serviceaccount': 'root',
        'io.cilium.k8s.namespace.labels.team': 'admin',
      }),
      ns({ team: 'a' }),
      (s) => skipped.push(s),
    );
    assert.equal(labels.get('io.kubernetes.pod.namespace')?.value, 'shop');
    assert.equal(labels.get('io.tendril.k8s.namespace.labels.team')?.value, 'a');
    assert.equal(labels.has('io.tendril.k8s.policy.serviceaccount'), false);
    assert.equal(labels.has('io.cilium.k8s.policy.serviceaccount'), false);
    assert.deepEqual(skipped.map((s) => s.key).sort(), [
      'io.cilium.k8s.namespace.labels.team',
      'io.cilium.k8s.policy.serviceaccount',
      'io.kubernetes.pod.namespace',
      'io.tendril.k8s.namespace.labels.team',
      'io.tendril.k8s.policy.serviceaccount',
    ]);
  });

  it('drops the derived keys in any case too (a key without \'/\' may hold capitals): the one list of src/labels', () => {
    const skipped: SkippedLabel[] = [];
    const labels = k8sPodLabels(pod({ app: 'web', 'IO.KUBERNETES.POD.NAMESPACE': 'kube-system', 'IO.Cilium.K8S.policy.cluster': 'other', 'io.tendril.k8s.policy.cluster': 'other' }), undefined, (s) => skipped.push(s));
    assert.deepEqual(labels.toStrings(), ['k8s:app=web', 'k8s:io.kubernetes.pod.namespace=shop']);
    assert.deepEqual(skipped.map((s) => s.key).sort(), ['IO.Cilium.K8S.policy.cluster', 'IO.KUBERNETES.POD.NAMESPACE', 'io.tendril.k8s.policy.cluster']);
  });

  it('leaves out a namespace label too long once prefixed, and says so', () => {
    const long = 'x'.repeat(40);
    const skipped: SkippedLabel[] = [];
    const labels = k8sPodLabels(pod({}), ns({ [long]: 'v' }), (s) => skipped.push(s));
    assert.equal(labels.size, 1);
    assert.equal(skipped.length, 1);
    assert.match(skipped[0]!.reason, /63/);
  });

  it('is what a NetworkPolicy podSelector + namespaceSelector selects', () => {
    const [policy] = parsePolicyText(`
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p, namespace: other}
spec:
  podSelector: {}
  ingress:
  - from:
    - namespaceSelector: {matchLabels: {team: a}}
      podSelector: {matchLabels: {app: web}}
`);
    const peer = policy!.rules[0]!.ingress.allow[0]!.peers;
    assert.notEqual(peer, 'all');
    const selector = (peer as readonly { matches(l: LabelSet): boolean }[])[0]!;
    assert.equal(selector.matches(k8sPodLabels(pod({ app: 'web' }), ns({ team: 'a' }))), true);
    assert.equal(selector.matches(k8sPodLabels(pod({ app: 'web' }), ns({ team: 'b' }))), false);
    assert.equal(selector.matches(k8sPodLabels(pod({ app: 'db' }), ns({ team: 'a' }))), false);
  });
});
