/**
 * Staged policies (Calico's staged policies, previewed in Cilium's audit
 * mode): a policy whose document carries the annotation
 * `tendril.io/staged: "true"` is computed like any other, into a "staged
 * view" of each endpoint it selects (the enforced policies and the staged
 * ones together: what would be enforced once they are promoted), and the
 * datapath reports where that view decides a new flow differently, without
 * enforcing it. The flag lives in the document, so the store, the ledger,
 * other nodes and the Kubernetes objects carry it with no field of their own;
 * promoting is removing the annotation.
 */
import type { Policy } from './rule.js';

export const STAGED_ANNOTATION = 'tendril.io/staged';

/** The annotation's meaning: staged, enforced (absent or "false"), or a message for any other value. */
export function stagedOf(annotations: Readonly<Record<string, string>> | undefined): boolean | string {
  const v = annotations?.[STAGED_ANNOTATION];
  if (v === undefined || v === 'false') return false;
  if (v === 'true') return true;
  return `must be "true" or "false", not ${JSON.stringify(v)}`;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * The policy staged (the annotation set) or enforced (the annotation
 * removed, and an annotations object it leaves empty): its rules are the
 * same, only the document and the flag change.
 */
export function withStaged(policy: Policy, staged: boolean): Policy {
  const doc = isRecord(policy.document) ? { ...policy.document } : {};
  const metadata = isRecord(doc.metadata) ? { ...doc.metadata } : {};
  const annotations: Record<string, unknown> = isRecord(metadata.annotations) ? { ...metadata.annotations } : {};
  if (staged) annotations[STAGED_ANNOTATION] = 'true';
  else delete annotations[STAGED_ANNOTATION];
  if (Object.keys(annotations).length > 0) metadata.annotations = annotations;
  else delete metadata.annotations;
  doc.metadata = metadata;
  const { staged: _was, ...rest } = policy;
  return staged ? { ...rest, document: doc, staged: true } : { ...rest, document: doc };
}
