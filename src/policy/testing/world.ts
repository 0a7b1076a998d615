/**
 * A small cluster for tests: identities, endpoints and a PolicyEngine, with a
 * flow verdict read two ways — from the computed map states (what the
 * datapath would do) and from the rules (trace) — so tests can demand both.
 */
import { parseCidrLabelKey } from '../../labels/index.js';
import { hostPrefix, parseIp, prefixContains } from '../../netip/index.js';
import { PolicyEngine, type PolicyEngineOptions } from '../engine.js';
import { LocalIdentityTable } from '../identities.js';
import { MapState } from '../mapState.js';
import { Proto, ReservedIdentity, type Identity, type NamedPort, type Verdict } from '../types.js';

export interface Pod {
  readonly name: string;
  readonly endpointId: number;
  readonly identity: Identity;
}

export type Peer = Pod | Identity;

function isPod(p: Peer): p is Pod {
  return 'endpointId' in p;
}

export class TestWorld {
  readonly identities = new LocalIdentityTable();
  readonly engine: PolicyEngine;
  readonly pods = new Map<string, Pod>();
  /** Each endpoint's map as the datapath would hold it: changed only when a regeneration names the endpoint. */
  readonly datapath = new Map<number, MapState>();
  #nextEndpoint = 1;

  constructor(options: Omit<PolicyEngineOptions, 'identities' | 'cidrIdentities'> = {}) {
    this.engine = new PolicyEngine({ ...options, identities: this.identities, cidrIdentities: this.identities });
  }

  get host(): Identity {
    return this.identities.get(ReservedIdentity.Host)!;
  }

  get world(): Identity {
    return this.identities.get(ReservedIdentity.World)!;
  }

  /** A pod `ns/name` with k8s labels (and its namespace's labels), registered as a local endpoint. */
  pod(
    ref: string,
    labels: Record<string, string>,
    opts: { namespaceLabels?: Record<string, string>; namedPorts?: NamedPort[] } = {},
  ): Pod {
    const ns = ref.split('/')[0]!;
    const identity = this.identities.allocatePod(ns, labels, opts.namespaceLabels ?? {});
    // Identity first (as the agent does: allocate, then tell the engine), then the endpoint.
    this.apply(this.engine.identitiesChanged([identity]).regenerations);
    const pod: Pod = { name: ref, endpointId: this.#nextEndpoint++, identity };
    this.apply(this.engine.upsertEndpoint({ id: pod.endpointId, identity: identity.id, namedPorts: opts.namedPorts ?? [] }).regenerations);
    this.pods.set(ref, pod);
    return pod;
  }

  /** A remote peer (a pod elsewhere in the cluster) or any label set: an identity without an endpoint. */
  remote(labels: string[]): Identity {
    const identity = this.identities.allocate(labels);
    this.apply(this.engine.identitiesChanged([identity]).regenerations);
    return identity;
  }

  /** The identity the ipcache would give an outside address: its CIDR identity if some rule named an enclosing prefix, else world. */
  external(ip: string): Identity {
    const addr = hostPrefix(parseIp(ip));
    let best: Identity | undefined;
    let bestLen = -1;
    for (const id of this.identities.list()) {
      for (const l of id.labels) {
        if (l.source !== 'cidr') continue;
        const p = parseCidrLabelKey(l.key)!;
        if (prefixContains(p, addr) && p.length > bestLen) {
          best = id;
          bestLen = p.length;
        }
      }
    }
    return best ?? this.world;
  }

  import(yaml: string): void {
    this.apply(this.engine.importText(yaml).regenerations);
  }

  /**
   * What the agent does with a change's regenerations: each named endpoint's
   * map becomes its map state at that moment (the writer diffs it against the
   * map); one with an error keeps its map. An endpoint whose state changed
   * but that is not named keeps a stale map, and mapVerdict says so.
   */
  apply(regens: ReadonlyArray<{ endpointId: number; error?: unknown }>): void {
    for (const r of regens) {
      if (r.error !== undefined) continue;
      const m = new MapState();
      m.replaceAll(this.engine.endpointPolicy(r.endpointId).entries);
      this.datapath.set(r.endpointId, m);
    }
  }

  /** The verdict the datapath reaches: source egress (if a local pod), then destination ingress (if a local pod). */
  mapVerdict(src: Peer, dst: Peer, port: number, proto: number = Proto.TCP): Verdict {
    const srcId = isPod(src) ? src.identity.id : src.id;
    const dstId = isPod(dst) ? dst.identity.id : dst.id;
    for (const [ep, dir, peer] of [
      [isPod(src) ? src.endpointId : undefined, 'egress', dstId],
      [isPod(dst) ? dst.endpointId : undefined, 'ingress', srcId],
    ] as const) {
      if (ep === undefined) continue;
      const held = this.datapath.get(ep)?.lookup(dir, peer, proto, port);
      const computed = this.engine.lookup(ep, dir, peer, proto, port);
      if ((held?.verdict ?? 'deny') !== computed.verdict) {
        throw new Error(`endpoint ${ep}: regenerated map gives ${held?.verdict ?? 'deny'}, computed map gives ${computed.verdict}`);
      }
      if (computed.verdict === 'deny') return 'deny';
    }
    return 'allow';
  }

  /** The verdict from the rules (policy trace). */
  traceVerdict(src: Peer, dst: Peer, port: number, proto: number = Proto.TCP): Verdict {
    const peer = (p: Peer) => (isPod(p) ? { endpoint: p.endpointId } : { identity: p.id });
    const t = this.engine.trace(peer(src), peer(dst), proto, port);
    // Only local pods have their policy enforced here; a remote peer's own policy runs on its node.
    if (!isPod(src)) return t.ingress.verdict;
    if (!isPod(dst)) return t.egress.verdict;
    return t.verdict;
  }
}
