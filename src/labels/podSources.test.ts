import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { LabelError, LabelErrorCode } from './errors.js';
import { parseLabel } from './label.js';
import { isPodLabelSource, POD_LABEL_SOURCES, requirePodLabel } from './podSources.js';
import { LabelSource } from './source.js';

describe('the label sources a pod may carry', () => {
  test('k8s and container only', () => {
    assert.deepEqual([...POD_LABEL_SOURCES], ['k8s', 'container']);
    for (const s of Object.values(LabelSource)) assert.equal(isPodLabelSource(s), s === 'k8s' || s === 'container', s);
  });

  test('requirePodLabel accepts a pod\'s labels', () => {
    for (const text of ['k8s:app=web', 'container:image=nginx', 'k8s:io.kubernetes.pod.namespace=default']) requirePodLabel(parseLabel(text));
  });

  for (const text of ['reserved:host', 'reserved:health', 'cidr:10.0.0.0/8', 'cidr:2001:db8::/32', 'unspec:app=web', 'any:app=web', 'app=web']) {
    test(`requirePodLabel refuses ${text}, naming it`, () => {
      assert.throws(
        () => requirePodLabel(parseLabel(text)),
        (err: unknown) => err instanceof LabelError && err.code === LabelErrorCode.SOURCE_NOT_ALLOWED && err.message.includes(JSON.stringify(parseLabel(text).source)) && err.input !== '',
      );
    });
  }
});
