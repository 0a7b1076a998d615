/**
 * The TendrilIdentity object (deploy/kubernetes/crds/tendrilidentities.yaml):
 * one cluster-wide identity, named by its number, its labels in
 * `security-labels`. Encoding, decoding, and the order in which a label set
 * tries numbers.
 */
import { createHash } from 'node:crypto';
import type { KubernetesObject } from '@kubernetes/client-node';
import { LabelError, LabelSet, LabelSource, makeLabel, type Label } from '../labels/index.js';
import { IdentityError, isGlobalIdentityNumber, makeIdentity, scopeOf, type Identity } from '../identity/index.js';
import { TENDRIL_POLICY_GROUP, TENDRIL_POLICY_VERSION } from './policyWatcher.js';

export const TENDRIL_IDENTITY_GROUP = TENDRIL_POLICY_GROUP;
export const TENDRIL_IDENTITY_VERSION = TENDRIL_POLICY_VERSION;
export const TENDRIL_IDENTITY_PLURAL = 'tendrilidentities';
export const TENDRIL_IDENTITY_KIND = 'TendrilIdentity';
export const TENDRIL_IDENTITY_PATH = `/apis/${TENDRIL_IDENTITY_GROUP}/${TENDRIL_IDENTITY_VERSION}/${TENDRIL_IDENTITY_PLURAL}`;

export interface TendrilIdentityObject extends KubernetesObject {
  'security-labels': Record<string, string>;
}

// Kubernetes label syntax (apimachinery's IsQualifiedName / IsValidLabelValue).
const LABEL_NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

function isLabelKey(key: string): boolean {
  const slash = key.indexOf('/');
  const name = slash < 0 ? key : key.slice(slash + 1);
  if (name.length > 63 || !LABEL_NAME.test(name)) return false;
  if (slash < 0) return true;
  const prefix = key.slice(0, slash);
  return prefix.length <= 253 && DNS_SUBDOMAIN.test(prefix);
}

function isLabelValue(value: string): boolean {
  return value === '' || (value.length <= 63 && LABEL_NAME.test(value));
}

/**
 * The object for identity `id`. metadata.labels holds the k8s: labels that
 * are valid Kubernetes labels (a selector-friendly copy, as CiliumIdentity
 * has); security-labels is the authority and holds every label.
 */
export function tendrilIdentityObject(id: number, labels: LabelSet): TendrilIdentityObject {
  const security: Record<string, string> = {};
  const selectable: Record<string, string> = {};
  for (const l of labels) {
    security[`${l.source}:${l.key}`] = l.value;
    if (l.source === LabelSource.K8s && isLabelKey(l.key) && isLabelValue(l.value)) selectable[l.key] = l.value;
  }
  return {
    apiVersion: `${TENDRIL_IDENTITY_GROUP}/${TENDRIL_IDENTITY_VERSION}`,
    kind: TENDRIL_IDENTITY_KIND,
    metadata: { name: String(id), labels: selectable },
    'security-labels': security,
  };
}

/** The identity number an object name stands for: a global number in canonical decimal, else undefined. */
export function identityNumberOfName(name: string | undefined): number | undefined {
  if (name === undefined || !/^[1-9][0-9]{0,9}$/.test(name)) return undefined;
  const n = Number(name);
  return isGlobalIdentityNumber(n) && scopeOf(n) === 'global' ? n : undefined;
}

/** The identity an object holds, or a reason it holds none (bad name or labels). */
export function identityOfObject(obj: KubernetesObject): Identity | string {
  const name = obj.metadata?.name;
  const id = identityNumberOfName(name);
  if (id === undefined) return `name ${JSON.stringify(name)} is not a cluster-wide identity number`;
  const raw = (obj as Partial<TendrilIdentityObject>)['security-labels'];
  if (typeof raw !== 'object' || raw === null) return 'no security-labels';
  const labels: Label[] = [];
  try {
    for (const [slot, value] of Object.entries(raw)) {
      const colon = slot.indexOf(':');
      if (colon <= 0 || typeof value !== 'string') return `security label ${JSON.stringify(slot)} is not source:key → string`;
      labels.push(makeLabel(slot.slice(0, colon), slot.slice(colon + 1), value));
    }
  } catch (err) {
    if (err instanceof LabelError || err instanceof IdentityError) return err.message;
    throw err;
  }
  if (labels.length === 0) return 'security-labels is empty';
  return makeIdentity(id, LabelSet.from(labels));
}

/**
 * The number a label set tries first: a hash of its sorted form folded into
 * minId..maxId. Every node computes the same one and walks on from it in the
 * same order (identityProbeOrder), which is what makes racing nodes agree.
 */
export function identityProbeStart(sortedLabels: string, minId: number, maxId: number): number {
  const h = createHash('sha256').update(sortedLabels).digest().readUInt32BE(0);
  return minId + (h % (maxId - minId + 1));
}

/** Where n comes in the label set's order (0 = its first choice). */
export function identityProbePosition(sortedLabels: string, n: number, minId: number, maxId: number): number {
  const size = maxId - minId + 1;
  return (n - identityProbeStart(sortedLabels, minId, maxId) + size) % size;
}

/** Every number of minId..maxId once, from the label set's first choice upwards, wrapping around. */
export function* identityProbeOrder(sortedLabels: string, minId: number, maxId: number): Generator<number> {
  const size = maxId - minId + 1;
  const first = identityProbeStart(sortedLabels, minId, maxId) - minId;
  for (let i = 0; i < size; i++) yield minId + ((first + i) % size);
}
