/**
 * SNAT garbage collection. tendril_snat4 holds both sides of each mapping:
 * the original tuple as it leaves (EGRESS key → the node address and port)
 * and the translated tuple as replies arrive (INGRESS key → the original
 * source). A mapping lives as long as its flow: when conntrack has no live
 * entry for the EGRESS key's tuple (the original tuple, as conntrack keys
 * it), both sides go and the port is free again. Runs from the conntrack
 * GC's loop, after it removed the expired flows.
 */
import { formatIp } from '../../netip/index.js';
import { MapName, NatDirection } from './constants.js';
import type { DatapathInspector } from './inspect.js';
import { ct4Key, ctEntry, nat4Entry, type Nat4EntryValue, type Nat4Key, nat4Key } from './layout.js';

const IPPROTO_TCP = 6;
const IPPROTO_ICMP = 1;

export interface NatGcResult {
  scanned: number;
  /** Mappings (both sides) removed because their flow is gone. */
  removed: number;
  /** INGRESS sides left without their EGRESS side, removed once older than the grace period. */
  orphans: number;
}

export interface NatGcOptions {
  /** "Now" on CLOCK_MONOTONIC (default process.hrtime.bigint()). */
  nowNs?: bigint;
  /**
   * Mappings younger than this are left alone (default 10 s): the programs
   * create a mapping and its conntrack entry one after the other, and a pass
   * in between must not take the mapping of a flow being opened.
   */
  graceNs?: bigint;
}

export const DEFAULT_NAT_GC_GRACE_NS = 10_000_000_000n;

/**
 * The reply side's identity, matched against an EGRESS entry: the remote
 * end, the node address and port the mapping gave, and the original source
 * it points back to. ICMP echo keys carry the identifier as both ports, so
 * the remote "port" only counts for TCP and UDP.
 */
function pairId(proto: number, remote: string, remotePort: number, natAddr: string, natPort: number, origAddr: string, origPort: number): string {
  return [proto, remote, proto === IPPROTO_ICMP ? '' : remotePort, natAddr, natPort, origAddr, origPort].join('|');
}

function ingressIdOfEgress(k: Nat4Key, v: Nat4EntryValue): string {
  return pairId(k.proto, formatIp(k.daddr), k.dport, formatIp(v.toAddr), v.toPort, formatIp(k.saddr), k.sport);
}

function ingressId(k: Nat4Key, v: Nat4EntryValue): string {
  return pairId(k.proto, formatIp(k.saddr), k.sport, formatIp(k.daddr), k.dport, formatIp(v.toAddr), v.toPort);
}

/** One pass over tendril_snat4. */
export async function collectNat(inspector: DatapathInspector, opts: NatGcOptions = {}): Promise<NatGcResult> {
  const nowNs = opts.nowNs ?? process.hrtime.bigint();
  const grace = opts.graceNs ?? DEFAULT_NAT_GC_GRACE_NS;
  const result: NatGcResult = { scanned: 0, removed: 0, orphans: 0 };
  return inspector.withMap(MapName.SNAT, nat4Key, nat4Entry, (snat) =>
    inspector.withMap(MapName.CT_TCP, ct4Key, ctEntry, (ctTcp) =>
      inspector.withMap(MapName.CT_ANY, ct4Key, ctEntry, async (ctAny) => {
        const egress: Array<[Nat4Key, Nat4EntryValue]> = [];
        const ingress = new Map<string, Array<[Nat4Key, Nat4EntryValue]>>();
        for await (const [k, v] of snat.entries()) {
          result.scanned++;
          if (k.dir === NatDirection.EGRESS) {
            egress.push([k, v]);
          } else {
            const id = ingressId(k, v);
            const list = ingress.get(id);
            if (list) list.push([k, v]);
            else ingress.set(id, [[k, v]]);
          }
        }
        const young = (v: Nat4EntryValue) => nowNs - v.createdNs < grace;
        for (const [k, v] of egress) {
          const partners = ingress.get(ingressIdOfEgress(k, v)) ?? [];
          ingress.delete(ingressIdOfEgress(k, v));
          if (young(v)) continue;
          const ct = k.proto === IPPROTO_TCP ? ctTcp : ctAny;
          const flow = ct.get({ saddr: k.saddr, daddr: k.daddr, sport: k.sport, dport: k.dport, proto: k.proto, flags: 0 });
          if (flow !== undefined && flow.expiresNs > nowNs) continue;
          // The reply side first: a late reply then finds no mapping rather than a half one.
          for (const [ik] of partners) snat.delete(ik);
          if (snat.delete(k)) result.removed++;
        }
        // What is left has no EGRESS side: a mapping whose other half the LRU evicted, or one being made.
        for (const list of ingress.values()) {
          for (const [k, v] of list) {
            if (young(v)) continue;
            if (snat.delete(k)) result.orphans++;
          }
        }
        return result;
      }),
    ),
  );
}
