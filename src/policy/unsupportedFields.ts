/**
 * CiliumNetworkPolicy fields beyond what tendril enforces (L7 rules, DNS names,
 * Services, cloud groups, node selectors, ICMP types, authentication, CIDR
 * groups). Users bring Cilium policies unchanged, so each such field gets its
 * own issue saying why it is refused, instead of the strict schema's bare
 * "unknown field". The fields are taken out of a copy of the document so the
 * schema still reports every other problem of the same document.
 */

type PathSeg = string | number;

export interface UnsupportedField {
  path: PathSeg[];
  message: string;
}

/** Every refusal says why, in the same words, then what to write instead. */
const L3L4 = 'tendril enforces L3/L4 only';
const refuse = (what: string, instead?: string) => `${what}: ${L3L4}${instead === undefined ? '' : `; ${instead}`}`;

const RULE_FIELDS: Readonly<Record<string, string>> = {
  nodeSelector: refuse('host policies (nodeSelector) are not supported', 'select pods with endpointSelector'),
};

const PEER_FIELDS: Readonly<Record<string, string>> = {
  toFQDNs: refuse('DNS-name rules (toFQDNs) need a DNS proxy, which is L7', 'name the addresses with toCIDR or toCIDRSet'),
  toServices: refuse('toServices (peers found through a Kubernetes Service) is not supported', "select the service's pods with toEndpoints"),
  toGroups: refuse('cloud-provider groups (toGroups) are not supported', 'name the addresses with toCIDR or toCIDRSet'),
  fromGroups: refuse('cloud-provider groups (fromGroups) are not supported', 'name the addresses with fromCIDR or fromCIDRSet'),
  toRequires: refuse('toRequires is not supported', 'put the required labels into each toEndpoints selector'),
  fromRequires: refuse('fromRequires is not supported', 'put the required labels into each fromEndpoints selector'),
  toNodes: refuse('node selectors (toNodes) are not supported', 'use toEntities [host, remote-node]'),
  fromNodes: refuse('node selectors (fromNodes) are not supported', 'use fromEntities [host, remote-node]'),
  icmps: refuse('ICMP type rules (icmps) are not supported', 'ports match TCP, UDP, SCTP or ANY, and a rule without toPorts allows ICMP with its peers'),
  authentication: refuse('mutual authentication (authentication) is not supported'),
};

const PORT_RULE_FIELDS: Readonly<Record<string, string>> = {
  terminatingTLS: refuse('TLS termination (terminatingTLS) is L7'),
  originatingTLS: refuse('TLS origination (originatingTLS) is L7'),
  serverNames: refuse('TLS server-name matching (serverNames) is L7'),
  listener: refuse('Envoy listeners (listener) are L7'),
};

/** The kinds of L7 rules a port rule's `rules` may hold, as its message names them. */
const L7_RULE_KINDS: Readonly<Record<string, string>> = {
  http: 'HTTP',
  kafka: 'Kafka',
  dns: 'DNS (a DNS proxy)',
  l7proto: 'L7 protocol parser',
  l7: 'generic L7',
};

const CIDR_RULE_FIELDS: Readonly<Record<string, string>> = {
  cidrGroupRef: refuse('CiliumCIDRGroup references (cidrGroupRef) are not supported', 'write the CIDRs in cidr'),
  cidrGroupSelector: refuse('CiliumCIDRGroup selectors (cidrGroupSelector) are not supported', 'write the CIDRs in cidr'),
};

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The result: a copy without the refused fields, what was refused, and the objects they were taken from. */
export interface StrippedDocument {
  value: unknown;
  refused: UnsupportedField[];
  /** Paths of the objects that lost a field: a required field missing there follows from the refusal. */
  strippedObjects: PathSeg[][];
}

class Stripper {
  readonly refused: UnsupportedField[] = [];
  readonly strippedObjects: PathSeg[][] = [];

  /** A copy of `obj` without the fields in `table`, each recorded at its path. */
  strip(obj: Record<string, unknown>, path: PathSeg[], table: Readonly<Record<string, string>>): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    let stripped = false;
    for (const [k, v] of Object.entries(obj)) {
      const message = Object.hasOwn(table, k) ? table[k] : undefined;
      if (message === undefined) {
        out[k] = v;
      } else {
        this.refused.push({ path: [...path, k], message });
        stripped = true;
      }
    }
    if (stripped) this.strippedObjects.push(path);
    return out;
  }

  /** Applies `each` to every object of an array field, keeping non-objects for the schema to report. */
  mapArray(obj: Record<string, unknown>, field: string, path: PathSeg[], each: (o: Record<string, unknown>, p: PathSeg[]) => unknown): void {
    const list = obj[field];
    if (!Array.isArray(list)) return;
    obj[field] = list.map((item: unknown, i) => (isRecord(item) ? each(item, [...path, field, i]) : item));
  }

  portRule(pr: Record<string, unknown>, path: PathSeg[]): Record<string, unknown> {
    const out = this.strip(pr, path, PORT_RULE_FIELDS);
    if (!('rules' in out)) return out;
    const rules = out.rules;
    delete out.rules;
    this.strippedObjects.push(path);
    // One issue for the whole `rules` (the fix is to drop it), naming each kind of L7 rule in it.
    const kinds = isRecord(rules) ? Object.keys(rules).filter((k) => Object.hasOwn(L7_RULE_KINDS, k)) : [];
    const what = kinds.length === 0 ? 'port rules with `rules`' : `${kinds.map((k) => `${L7_RULE_KINDS[k]!} rules (rules.${k})`).join(', ')}`;
    this.refused.push({ path: [...path, 'rules'], message: refuse(`${what} are L7`, 'without `rules` the port is allowed for all traffic') });
    return out;
  }

  peerRule(r: Record<string, unknown>, path: PathSeg[]): Record<string, unknown> {
    const out = this.strip(r, path, PEER_FIELDS);
    this.mapArray(out, 'toPorts', path, (pr, p) => this.portRule(pr, p));
    for (const f of ['fromCIDRSet', 'toCIDRSet']) this.mapArray(out, f, path, (c, p) => this.strip(c, p, CIDR_RULE_FIELDS));
    return out;
  }

  rule(spec: Record<string, unknown>, path: PathSeg[]): Record<string, unknown> {
    const out = this.strip(spec, path, RULE_FIELDS);
    for (const f of ['ingress', 'ingressDeny', 'egress', 'egressDeny']) this.mapArray(out, f, path, (r, p) => this.peerRule(r, p));
    return out;
  }
}

/**
 * Takes the unsupported Cilium fields out of a tendril-shaped policy document
 * (`spec` and every `specs` entry). Anything malformed is left in place for
 * the schema to report.
 */
export function stripUnsupportedFields(doc: unknown): StrippedDocument {
  const s = new Stripper();
  if (!isRecord(doc)) return { value: doc, refused: [], strippedObjects: [] };
  const out: Record<string, unknown> = { ...doc };
  if (isRecord(out.spec)) out.spec = s.rule(out.spec, ['spec']);
  s.mapArray(out, 'specs', [], (r, p) => s.rule(r, p));
  return { value: out, refused: s.refused, strippedObjects: s.strippedObjects };
}
