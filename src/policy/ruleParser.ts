/**
 * RuleParser: YAML/JSON text (one or many documents, `---` separated, a JSON
 * array or a `kind: List`) → validated Policy objects. All-or-nothing: every
 * problem of every document is collected, each pointing at its field, and any
 * problem rejects the whole input.
 */
import { parseAllDocuments } from 'yaml';
import type { z } from 'zod';
import {
  LabelError,
  LabelSelector,
  LabelSet,
  LabelSource,
  makeLabel,
  NAMESPACE_LABEL_PREFIX,
  SERVICE_ACCOUNT_LABEL,
  type Label,
} from '../labels/index.js';
import { prefixContains, tryParsePrefix, type IpPrefix } from '../netip/index.js';
import { scanJson } from '../json/duplicateKeys.js';
import { PolicyParseError, PolicyValidationError, type PolicyIssue } from './errors.js';
import { PolicyKind, formatPolicyName, type PeerRule, type Policy, type PolicyName, type PortRule, type Rule } from './rule.js';
import {
  k8sNetworkPolicySchema,
  tendrilPolicySchema,
  type EgressRuleWire,
  type IngressRuleWire,
  type K8sNetworkPolicyWire,
  type K8sPeerWire,
  type K8sPortWire,
  type LabelSelectorWire,
  type PortProtocolWire,
  type TendrilPolicyWire,
  type TendrilRuleWire,
} from './schema.js';
import {
  CidrIdentitySelector,
  EntityIdentitySelector,
  LabelIdentitySelector,
  podsOnlyWhenEmpty,
  forceNamespace,
  restrictToNamespace,
  type Entity,
  type IdentitySelector,
} from './selector.js';
import type { ProtocolName } from './types.js';
import { STAGED_ANNOTATION, stagedOf } from './staged.js';
import { stripUnsupportedFields, type StrippedDocument } from './unsupportedFields.js';
import { checkPolicyNesting, MAX_POLICY_NESTING } from './yamlNesting.js';

// The derived keys are src/labels' (the one list of what only the agent may set); re-exported for the policy API.
export { NAMESPACE_LABEL_PREFIX, SERVICE_ACCOUNT_LABEL };
/** Derived policy labels, matched by delete-by-labels. */
export const POLICY_NAMESPACE_LABEL = 'io.tendril.policy.namespace';
export const POLICY_DERIVED_FROM_LABEL = 'io.tendril.policy.derived-from';

type PathSeg = string | number;

function formatPath(segs: readonly PathSeg[]): string {
  let out = '';
  for (const s of segs) out += typeof s === 'number' ? `[${s}]` : out === '' ? s : `.${s}`;
  return out;
}

/** One document being translated: collects issues instead of stopping at the first. */
class DocumentContext {
  /** Applied to every selector key after the caller's rewrite (Cilium's derived keys → tendril's). */
  keyMap: (key: string) => string = (k) => k;

  constructor(
    readonly document: number,
    readonly base: readonly PathSeg[],
    readonly issues: PolicyIssue[],
  ) {}

  issue(path: readonly PathSeg[], message: string): void {
    this.issues.push({ document: this.document, path: formatPath([...this.base, ...path]), message });
  }

  /** `skip` drops issues that follow from a problem already reported (a field missing because it was refused). */
  zodIssues(error: z.ZodError, skip: (path: readonly PathSeg[]) => boolean = () => false): void {
    for (const i of error.issues) {
      const path = i.path.filter((p): p is PathSeg => typeof p !== 'symbol');
      if (skip(path)) continue;
      if (i.code === 'unrecognized_keys') {
        for (const k of i.keys) this.issue([...path, k], 'unknown field');
      } else {
        this.issue(path, i.message);
      }
    }
  }

  /** Parses a selector; `keySource` forces a source on keys that have none (k8s pod labels). */
  selector(wire: LabelSelectorWire, path: readonly PathSeg[], rewriteKey: (key: string) => string = (k) => k): LabelSelector | undefined {
    try {
      return LabelSelector.parse({
        matchLabels: Object.fromEntries(Object.entries(wire.matchLabels ?? {}).map(([k, v]) => [this.keyMap(rewriteKey(k)), v])),
        matchExpressions: (wire.matchExpressions ?? []).map((e) => ({ ...e, key: this.keyMap(rewriteKey(e.key)) })),
      });
    } catch (err) {
      if (err instanceof LabelError) {
        this.issue(path, err.message);
        return undefined;
      }
      throw err;
    }
  }

  cidr(text: string, path: readonly PathSeg[]): IpPrefix | undefined {
    // Host bits are cleared: 10.0.0.1/8 selects 10.0.0.0/8.
    const p = tryParsePrefix(text, { hostBits: 'mask' });
    if (p === undefined) this.issue(path, `${JSON.stringify(text)} is not a CIDR (e.g. 10.0.0.0/8)`);
    return p;
  }

  /** A CIDR with excepts; excepts must lie strictly inside it (as Kubernetes validates ipBlock). */
  cidrSet(cidr: string, except: readonly string[] | undefined, path: readonly PathSeg[]): CidrIdentitySelector | undefined {
    const prefix = this.cidr(cidr, [...path, 'cidr']);
    const excepts: IpPrefix[] = [];
    (except ?? []).forEach((e, i) => {
      const p = this.cidr(e, [...path, 'except', i]);
      if (p === undefined || prefix === undefined) return;
      if (!prefixContains(prefix, p) || p.length === prefix.length) {
        this.issue([...path, 'except', i], `${e} is not strictly inside ${cidr}`);
        return;
      }
      excepts.push(p);
    });
    return prefix === undefined ? undefined : new CidrIdentitySelector(prefix, excepts);
  }
}

const IANA_SVC_NAME = /^(?=.*[a-z])[a-z0-9](?:[a-z0-9]|-(?!-))*[a-z0-9]$|^[a-z]$/;

/** A port field: a number 1–65535 (or its digits as text), a named port, or absent (every port). */
function portField(
  ctx: DocumentContext,
  protocol: ProtocolName,
  port: number | string | undefined,
  endPort: number | undefined,
  path: readonly PathSeg[],
  zeroMeansAll: boolean,
): PortRule | undefined {
  if (port === undefined || (zeroMeansAll && (port === 0 || port === '0'))) {
    if (endPort !== undefined) {
      ctx.issue([...path, 'endPort'], 'endPort needs a numeric port');
      return undefined;
    }
    return { protocol, port: 0, endPort: 0 };
  }
  const numeric = typeof port === 'number' ? port : /^[0-9]+$/.test(port) ? Number(port) : undefined;
  if (numeric === undefined) {
    const name = port as string;
    if (name.length > 15 || !IANA_SVC_NAME.test(name)) {
      ctx.issue([...path, 'port'], `${JSON.stringify(name)} is neither a port number nor a port name (lowercase, ≤15 characters, a letter, no "--")`);
      return undefined;
    }
    if (endPort !== undefined) {
      ctx.issue([...path, 'endPort'], 'endPort cannot be used with a named port');
      return undefined;
    }
    return { protocol, port: 0, endPort: 0, name };
  }
  if (!Number.isInteger(numeric) || numeric < 1 || numeric > 65535) {
    ctx.issue([...path, 'port'], `port ${numeric} is outside 1–65535`);
    return undefined;
  }
  if (endPort !== undefined && (endPort < numeric || endPort > 65535)) {
    ctx.issue([...path, 'endPort'], `endPort ${endPort} must be between port ${numeric} and 65535`);
    return undefined;
  }
  return { protocol, port: numeric, endPort: endPort ?? numeric };
}

// ---- Kubernetes NetworkPolicy ----------------------------------------------

const k8sKey = (key: string) => `${LabelSource.K8s}:${key}`;
const namespaceKey = (key: string) => `${LabelSource.K8s}:${NAMESPACE_LABEL_PREFIX}${key}`;

function k8sPeer(ctx: DocumentContext, peer: K8sPeerWire, namespace: string, path: readonly PathSeg[]): IdentitySelector | undefined {
  if (peer.ipBlock !== undefined) {
    if (peer.podSelector !== undefined || peer.namespaceSelector !== undefined) {
      ctx.issue(path, 'ipBlock cannot be combined with podSelector or namespaceSelector');
      return undefined;
    }
    return ctx.cidrSet(peer.ipBlock.cidr, peer.ipBlock.except, [...path, 'ipBlock']);
  }
  if (peer.podSelector === undefined && peer.namespaceSelector === undefined) {
    ctx.issue(path, 'a peer needs podSelector, namespaceSelector or ipBlock');
    return undefined;
  }
  const pods = peer.podSelector === undefined ? undefined : ctx.selector(peer.podSelector, [...path, 'podSelector'], k8sKey);
  if (peer.namespaceSelector === undefined) {
    // podSelector alone: pods of the policy's own namespace.
    return pods === undefined ? undefined : new LabelIdentitySelector(forceNamespace(pods, namespace));
  }
  const ns = ctx.selector(peer.namespaceSelector, [...path, 'namespaceSelector'], namespaceKey);
  if (ns === undefined || (peer.podSelector !== undefined && pods === undefined)) return undefined;
  // Any namespace the selector matches — but only pods, so the namespace label must exist.
  const combined = LabelSelector.parse({
    matchExpressions: [
      ...(pods?.toSpec().matchExpressions ?? []),
      ...(ns.toSpec().matchExpressions ?? []),
      { key: k8sKey('io.kubernetes.pod.namespace'), operator: 'Exists' },
    ],
  });
  return new LabelIdentitySelector(combined);
}

function k8sPorts(ctx: DocumentContext, ports: readonly K8sPortWire[] | undefined, path: readonly PathSeg[]): PortRule[] | 'all' {
  if (ports === undefined || ports.length === 0) return 'all';
  const out: PortRule[] = [];
  ports.forEach((p, i) => {
    const r = portField(ctx, p.protocol ?? 'TCP', p.port, p.endPort, [...path, i], false);
    if (r !== undefined) out.push(r);
  });
  return out;
}

function translateK8s(ctx: DocumentContext, doc: K8sNetworkPolicyWire): Omit<Policy, 'document'> {
  const namespace = doc.metadata.namespace ?? 'default';
  const name: PolicyName = { kind: PolicyKind.NetworkPolicy, namespace, name: doc.metadata.name };
  const policy = formatPolicyName(name);
  const spec = doc.spec;
  const podSel = ctx.selector(spec.podSelector, ['spec', 'podSelector'], k8sKey);
  // Kubernetes: without policyTypes, Ingress always, Egress when egress rules exist.
  const types = new Set(spec.policyTypes ?? ['Ingress', ...(spec.egress !== undefined && spec.egress.length > 0 ? ['Egress'] : [])]);
  const cidrs: IpPrefix[] = [];
  const peerRules = (
    rules: ReadonlyArray<{ from?: K8sPeerWire[]; to?: K8sPeerWire[]; ports?: K8sPortWire[] }>,
    field: 'ingress' | 'egress',
  ): PeerRule[] =>
    rules.map((r, i) => {
      const peersField = field === 'ingress' ? 'from' : 'to';
      const peersWire = field === 'ingress' ? r.from : r.to;
      const base: PathSeg[] = ['spec', field, i];
      let peers: IdentitySelector[] | 'all' = 'all';
      if (peersWire !== undefined && peersWire.length > 0) {
        peers = [];
        peersWire.forEach((p, j) => {
          const s = k8sPeer(ctx, p, namespace, [...base, peersField, j]);
          if (s instanceof CidrIdentitySelector) cidrs.push(s.prefix, ...s.except);
          if (s !== undefined) (peers as IdentitySelector[]).push(s);
        });
      }
      return { origin: { policy, rule: 0, path: formatPath(base) }, peers, ports: k8sPorts(ctx, r.ports, [...base, 'ports']) };
    });
  const rule: Rule = {
    policy: name,
    index: 0,
    subject: new LabelIdentitySelector(forceNamespace(podSel ?? LabelSelector.ALL, namespace)),
    ingress: { enforces: types.has('Ingress'), allow: types.has('Ingress') ? peerRules(spec.ingress ?? [], 'ingress') : [], deny: [] },
    egress: { enforces: types.has('Egress'), allow: types.has('Egress') ? peerRules(spec.egress ?? [], 'egress') : [], deny: [] },
  };
  return { name, labels: policyLabels(ctx, doc.metadata.labels, name), rules: [rule], cidrPrefixes: cidrs };
}

// ---- tendril policy ---------------------------------------------------------

function tendrilPorts(ctx: DocumentContext, rule: IngressRuleWire | EgressRuleWire, path: readonly PathSeg[]): PortRule[] | 'all' {
  if (rule.toPorts === undefined || rule.toPorts.length === 0) return 'all';
  const out: PortRule[] = [];
  rule.toPorts.forEach((pr, i) =>
    pr.ports.forEach((p: PortProtocolWire, j) => {
      const r = portField(ctx, p.protocol ?? 'ANY', p.port, p.endPort, [...path, 'toPorts', i, 'ports', j], true);
      if (r !== undefined) out.push(r);
    }),
  );
  return out;
}

function tendrilPeerRule(
  ctx: DocumentContext,
  rule: IngressRuleWire | EgressRuleWire,
  dir: 'from' | 'to',
  namespace: string,
  origin: PeerRule['origin'],
  path: readonly PathSeg[],
  cidrs: IpPrefix[],
): PeerRule {
  const r = rule as Record<string, unknown>;
  const endpoints = (r[`${dir}Endpoints`] as LabelSelectorWire[] | undefined) ?? [];
  const entities = (r[`${dir}Entities`] as Entity[] | undefined) ?? [];
  const cidrList = (r[`${dir}CIDR`] as string[] | undefined) ?? [];
  const cidrSets = (r[`${dir}CIDRSet`] as Array<{ cidr: string; except?: string[] }> | undefined) ?? [];
  const peers: IdentitySelector[] = [];
  endpoints.forEach((sel, i) => {
    const s = ctx.selector(sel, [...path, `${dir}Endpoints`, i]);
    if (s !== undefined) peers.push(new LabelIdentitySelector(namespace === '' ? podsOnlyWhenEmpty(s) : restrictToNamespace(s, namespace)));
  });
  for (const e of entities) peers.push(new EntityIdentitySelector(e));
  const addCidr = (s: CidrIdentitySelector | undefined) => {
    if (s === undefined) return;
    cidrs.push(s.prefix, ...s.except);
    peers.push(s);
  };
  cidrList.forEach((c, i) => addCidr(ctx.cidrSet(c, undefined, [...path, `${dir}CIDR`, i])));
  cidrSets.forEach((c, i) => addCidr(ctx.cidrSet(c.cidr, c.except, [...path, `${dir}CIDRSet`, i])));
  const named = endpoints.length + entities.length + cidrList.length + cidrSets.length > 0;
  const ports = tendrilPorts(ctx, rule, path);
  // As in Cilium: a rule naming only ports applies to every peer; a rule naming nothing selects nothing.
  const hasPorts = rule.toPorts !== undefined && rule.toPorts.length > 0;
  return { origin, peers: named ? peers : hasPorts ? 'all' : [], ports };
}

function translateTendrilRule(
  ctx: DocumentContext,
  name: PolicyName,
  spec: TendrilRuleWire,
  index: number,
  path: readonly PathSeg[],
  cidrs: IpPrefix[],
): Rule {
  const policy = formatPolicyName(name);
  const ns = name.namespace;
  const subjectSel = ctx.selector(spec.endpointSelector, [...path, 'endpointSelector']) ?? LabelSelector.ALL;
  const list = (field: 'ingress' | 'ingressDeny' | 'egress' | 'egressDeny'): PeerRule[] =>
    (spec[field] ?? []).map((r, i) => {
      const p = [...path, field, i];
      return tendrilPeerRule(ctx, r, field.startsWith('ingress') ? 'from' : 'to', ns, { policy, rule: index, path: formatPath(p) }, p, cidrs);
    });
  const enforces = (allow: unknown[] | undefined, deny: unknown[] | undefined, flag: boolean | undefined) =>
    flag !== false && ((allow?.length ?? 0) > 0 || (deny?.length ?? 0) > 0);
  return {
    policy: name,
    index,
    subject: new LabelIdentitySelector(ns === '' ? subjectSel : forceNamespace(subjectSel, ns)),
    ingress: {
      enforces: enforces(spec.ingress, spec.ingressDeny, spec.enableDefaultDeny?.ingress),
      allow: list('ingress'),
      deny: list('ingressDeny'),
    },
    egress: {
      enforces: enforces(spec.egress, spec.egressDeny, spec.enableDefaultDeny?.egress),
      allow: list('egress'),
      deny: list('egressDeny'),
    },
  };
}

/**
 * Cilium's keys for what its agent derives from Kubernetes (a pod's service
 * account, its namespace's labels) → tendril's, so an imported Cilium policy
 * selects what it selected under Cilium. The source prefix, if any, is kept.
 */
const CILIUM_DERIVED_KEYS: ReadonlyArray<readonly [string, string]> = [
  ['io.cilium.k8s.policy.serviceaccount', SERVICE_ACCOUNT_LABEL],
  ['io.cilium.k8s.namespace.labels.', NAMESPACE_LABEL_PREFIX],
];

export function ciliumKeyToTendril(key: string): string {
  const colon = key.indexOf(':');
  const [source, bare] = colon >= 0 ? [key.slice(0, colon + 1), key.slice(colon + 1)] : ['', key];
  for (const [cilium, tendril] of CILIUM_DERIVED_KEYS) {
    if (cilium.endsWith('.') ? bare.startsWith(cilium) : bare === cilium) return `${source}${tendril}${bare.slice(cilium.length)}`;
  }
  return key;
}

function translateTendril(ctx: DocumentContext, doc: TendrilPolicyWire): Omit<Policy, 'document'> {
  if (doc.apiVersion === 'cilium.io/v2') ctx.keyMap = ciliumKeyToTendril;
  const clusterwide = doc.kind.endsWith('ClusterwideNetworkPolicy');
  if (clusterwide && doc.metadata.namespace !== undefined) ctx.issue(['metadata', 'namespace'], 'a cluster-wide policy has no namespace');
  const name: PolicyName = {
    kind: clusterwide ? PolicyKind.TendrilClusterwideNetworkPolicy : PolicyKind.TendrilNetworkPolicy,
    namespace: clusterwide ? '' : (doc.metadata.namespace ?? 'default'),
    name: doc.metadata.name,
  };
  const cidrs: IpPrefix[] = [];
  const rules: Rule[] = [];
  if (doc.spec !== undefined) rules.push(translateTendrilRule(ctx, name, doc.spec, 0, ['spec'], cidrs));
  (doc.specs ?? []).forEach((s, i) => rules.push(translateTendrilRule(ctx, name, s, rules.length, ['specs', i], cidrs)));
  return { name, labels: policyLabels(ctx, doc.metadata.labels, name), rules, cidrPrefixes: cidrs };
}

function policyLabels(ctx: DocumentContext, labels: Record<string, string> | undefined, name: PolicyName): LabelSet {
  const out: Label[] = [makeLabel(LabelSource.K8s, POLICY_DERIVED_FROM_LABEL, name.kind)];
  if (name.namespace !== '') out.push(makeLabel(LabelSource.K8s, POLICY_NAMESPACE_LABEL, name.namespace));
  for (const [k, v] of Object.entries(labels ?? {})) {
    try {
      out.push(makeLabel(LabelSource.K8s, k, v));
    } catch (err) {
      if (!(err instanceof LabelError)) throw err;
      ctx.issue(['metadata', 'labels', k], err.message);
    }
  }
  return LabelSet.from(out);
}

// ---- documents --------------------------------------------------------------

interface RawDocument {
  document: number;
  base: PathSeg[];
  value: unknown;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Flattens JSON arrays and `kind: List` into single policy documents, keeping paths. */
function flatten(document: number, value: unknown, base: PathSeg[], out: RawDocument[]): void {
  if (value === null || value === undefined) return;
  if (Array.isArray(value)) {
    value.forEach((v, i) => flatten(document, v, [...base, i], out));
  } else if (isRecord(value) && value.kind === 'List' && Array.isArray(value.items)) {
    value.items.forEach((v, i) => flatten(document, v, [...base, 'items', i], out));
  } else {
    out.push({ document, base, value });
  }
}

/** A required field absent from an object that lost a refused field (a CIDR rule that had only cidrGroupRef). */
function missingAfterRefusal(stripped: StrippedDocument, path: readonly PathSeg[]): boolean {
  const parent = path.slice(0, -1);
  if (!stripped.strippedObjects.some((o) => o.length === parent.length && o.every((seg, i) => seg === parent[i]))) return false;
  let v: unknown = stripped.value;
  for (const seg of path) v = isRecord(v) || Array.isArray(v) ? (v as Record<PathSeg, unknown>)[seg] : undefined;
  return v === undefined;
}

function translateDocument(raw: RawDocument, issues: PolicyIssue[]): Policy | undefined {
  const ctx = new DocumentContext(raw.document, raw.base, issues);
  const before = issues.length;
  if (!isRecord(raw.value)) {
    ctx.issue([], 'a policy document must be an object');
    return undefined;
  }
  const { apiVersion, kind } = raw.value;
  let translated: Omit<Policy, 'document'> | undefined;
  if (kind === 'NetworkPolicy' && apiVersion === 'networking.k8s.io/v1') {
    const r = k8sNetworkPolicySchema.safeParse(raw.value);
    if (!r.success) ctx.zodIssues(r.error);
    else translated = translateK8s(ctx, r.data);
  } else if (typeof kind === 'string' && /NetworkPolicy$/.test(kind) && kind !== 'NetworkPolicy') {
    // Cilium fields tendril does not enforce get their own message; the rest of the document is still checked.
    const stripped = stripUnsupportedFields(raw.value);
    for (const f of stripped.refused) ctx.issue(f.path, f.message);
    const r = tendrilPolicySchema.safeParse(stripped.value);
    if (!r.success) ctx.zodIssues(r.error, (path) => missingAfterRefusal(stripped, path));
    else translated = translateTendril(ctx, r.data);
  } else {
    ctx.issue(
      ['kind'],
      `unsupported apiVersion/kind ${JSON.stringify(apiVersion)}/${JSON.stringify(kind)} ` +
        '(networking.k8s.io/v1 NetworkPolicy, tendril.io/v1 TendrilNetworkPolicy or TendrilClusterwideNetworkPolicy, cilium.io/v2 CiliumNetworkPolicy)',
    );
  }
  if (translated === undefined || issues.length > before) return undefined;
  // The schemas checked metadata.annotations: a map of strings, or absent.
  const staged = stagedOf((raw.value.metadata as { annotations?: Record<string, string> }).annotations);
  if (typeof staged === 'string') {
    ctx.issue(['metadata', 'annotations', STAGED_ANNOTATION], staged);
    return undefined;
  }
  return { ...translated, document: raw.value, ...(staged ? { staged: true as const } : {}) };
}

/**
 * Validates already-parsed documents (API bodies). Throws PolicyValidationError
 * listing every problem; returns policies in input order otherwise.
 */
export function parsePolicyDocuments(values: readonly unknown[]): Policy[] {
  const raws: RawDocument[] = [];
  values.forEach((v, i) => flatten(i, v, [], raws));
  return translateAll(raws);
}

function translateAll(raws: RawDocument[]): Policy[] {
  const issues: PolicyIssue[] = [];
  const policies: Policy[] = [];
  const seen = new Map<string, RawDocument>();
  for (const raw of raws) {
    const p = translateDocument(raw, issues);
    if (p === undefined) continue;
    const key = formatPolicyName(p.name);
    const prev = seen.get(key);
    if (prev !== undefined) {
      issues.push({ document: raw.document, path: formatPath([...raw.base, 'metadata', 'name']), message: `${key} is given twice in this input` });
    }
    seen.set(key, raw);
    policies.push(p);
  }
  if (issues.length > 0) throw new PolicyValidationError(issues);
  return policies;
}

/**
 * A document's value. Aliases are expanded with a budget (the yaml library's
 * maxAliasCount weighs each alias by the aliases inside what it names), so a billion-laughs
 * document of a few hundred bytes is refused before it grows; what toJS
 * throws then (a ReferenceError) is a fault of the text, not of the agent.
 */
function documentValue(doc: { toJS(opts: { maxAliasCount: number }): unknown }, index: number): unknown {
  try {
    return doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    if (err instanceof ReferenceError) throw new PolicyParseError(index, `${err.message}: too many or too deeply nested aliases`);
    throw err;
  }
}

/**
 * Policy text of JSON documents only (one, or several between lines that
 * are just `---`), parsed with JSON.parse: an import of 10,000 policies
 * costs a tenth of the YAML parser's time and garbage (its token tree is
 * most of an import's peak memory). Undefined, so the YAML parser runs and
 * says what is wrong, for anything else and for JSON that is not plainly
 * good: a syntax error, a repeated key (which YAML refuses and JSON.parse
 * would quietly take the last of), nesting past MAX_POLICY_NESTING. The
 * documents are numbered as YAML numbers them: a leading `---` opens the
 * first, an empty one between two counts.
 */
function jsonDocuments(text: string): unknown[] | undefined {
  const parts = text.split(/^---[ \t]*$/m);
  const docs: unknown[] = [];
  for (const [i, part] of parts.entries()) {
    const t = part.trim();
    if (t === '') {
      if (i > 0) docs.push(null);
      continue;
    }
    if (t[0] !== '{' && t[0] !== '[') return undefined;
    const scan = scanJson(t);
    if (scan.duplicate !== undefined || scan.depth > MAX_POLICY_NESTING) return undefined;
    try {
      docs.push(JSON.parse(t));
    } catch {
      return undefined;
    }
  }
  return docs;
}

/** Parses YAML or JSON text with any number of documents. */
export function parsePolicyText(text: string): Policy[] {
  const json = jsonDocuments(text);
  if (json !== undefined) {
    const raws: RawDocument[] = [];
    json.forEach((doc, i) => flatten(i, doc, [], raws));
    return translateAll(raws);
  }
  checkPolicyNesting(text);
  const docs = parseAllDocuments(text);
  const list = Array.isArray(docs) ? docs : [docs];
  const raws: RawDocument[] = [];
  list.forEach((doc, i) => {
    const err = doc.errors[0];
    if (err !== undefined) {
      // The parser's first message line repeats the position; keep the words, report the line separately.
      const words = (err.message.split('\n')[0] ?? err.message).replace(/ at line \d+, column \d+:?$/, '');
      throw new PolicyParseError(i, words, err.linePos?.[0]?.line);
    }
    flatten(i, documentValue(doc, i), [], raws);
  });
  return translateAll(raws);
}
