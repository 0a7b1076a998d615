import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { LabelError, LabelErrorCode, LabelFilter, LabelSet } from './index.js';

const pod = LabelSet.parse([
  'k8s:app=web',
  'k8s:pod-template-hash=5d8f9c7b6',
  'k8s:controller-revision-hash=web-7c9',
  'k8s:statefulset.kubernetes.io/pod-name=web-0',
  'k8s:apps.kubernetes.io/pod-index=0',
  'k8s:io.kubernetes.pod.namespace=shop',
  'k8s:io.kubernetes.pod.name=web-0',
  'k8s:app.kubernetes.io/name=web',
  'k8s:io.cilium.k8s.policy.serviceaccount=default',
  'k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=shop',
  'k8s:topology.kubernetes.io/zone=a',
  'reserved:init',
]);

describe('LabelFilter', () => {
  test("Cilium's default exclusions", () => {
    const { identity, informational } = LabelFilter.DEFAULT.split(pod);
    assert.deepEqual(identity.toStrings(), [
      'k8s:app=web',
      'k8s:app.kubernetes.io/name=web',
      'k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=shop',
      'k8s:io.cilium.k8s.policy.serviceaccount=default',
      'k8s:io.kubernetes.pod.namespace=shop',
      'reserved:init',
    ]);
    assert.deepEqual(informational.toStrings(), [
      'k8s:apps.kubernetes.io/pod-index=0',
      'k8s:controller-revision-hash=web-7c9',
      'k8s:io.kubernetes.pod.name=web-0',
      'k8s:pod-template-hash=5d8f9c7b6',
      'k8s:statefulset.kubernetes.io/pod-name=web-0',
      'k8s:topology.kubernetes.io/zone=a',
    ]);
  });

  test('the namespace label cannot be excluded', () => {
    const f = new LabelFilter({ exclude: ['io\\.kubernetes\\.pod\\.namespace', '.*'] });
    assert.deepEqual(f.identityLabels(pod).toStrings(), ['k8s:io.kubernetes.pod.namespace=shop', 'reserved:init']);
  });

  test('user includes: only named labels (plus defaults) count', () => {
    const f = LabelFilter.fromPatterns(['k8s:app$']);
    assert.deepEqual(f.identityLabels(pod).toStrings(), [
      'k8s:app=web',
      'k8s:app.kubernetes.io/name=web',
      'k8s:io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name=shop',
      'k8s:io.cilium.k8s.policy.serviceaccount=default',
      'k8s:io.kubernetes.pod.namespace=shop',
      'reserved:init',
    ]);
  });

  test('user patterns override defaults; longest match wins', () => {
    const f = LabelFilter.fromPatterns(['k8s:topology\\.kubernetes\\.io/zone', '!app']);
    const ids = f.identityLabels(pod).toStrings();
    assert.ok(ids.includes('k8s:topology.kubernetes.io/zone=a'));
    assert.ok(!ids.includes('k8s:app=web'));
    const g = LabelFilter.fromPatterns(['!app', 'app\\.kubernetes']);
    assert.ok(g.identityLabels(pod).toStrings().includes('k8s:app.kubernetes.io/name=web'));
    // Source-scoped pattern does not touch other sources.
    const h = LabelFilter.fromPatterns(['container:!app']);
    assert.ok(h.identityLabels(pod).toStrings().includes('k8s:app=web'));
  });

  test('bad regex is a typed error', () => {
    assert.throws(
      () => new LabelFilter({ include: ['k8s:('] }),
      (err: unknown) => err instanceof LabelError && err.code === LabelErrorCode.INVALID_PATTERN,
    );
  });
});
