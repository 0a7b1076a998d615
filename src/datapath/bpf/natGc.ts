/**
 * SNAT garbage collection. tendril_snat4 (and tendril_snat6, the same for
 * IPv6) holds both sides of each mapping:
 * the original tuple as it leaves (EGRESS key → the node address and port)
 * and the translated tuple as replies arrive (INGRESS key → the original
 * source). A mapping lives as long as its flow: when conntrack has no live
 * entry for the EGRESS key's tuple (the original tuple, as conntrack keys
 * it), both sides go and the port is free again; a reply side whose
 * original side is gone goes alone. The walk is the GC program's
 * (bpf/bpf_gc.c), run from the conntrack GC's pass after the flows.
 */
import { withGcProgram } from './gcProgram.js';
import { GcMap } from './constants.js';
import type { DatapathInspector } from './inspect.js';

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

/** One pass over tendril_snat4 and tendril_snat6 alone, their counts together (the conntrack GC's pass includes it). */
export async function collectNat(inspector: DatapathInspector, opts: NatGcOptions = {}): Promise<NatGcResult> {
  const nowNs = opts.nowNs ?? process.hrtime.bigint();
  return withGcProgram(inspector, async (gc) => {
    const out: NatGcResult = { scanned: 0, removed: 0, orphans: 0 };
    for (const map of [GcMap.SNAT, GcMap.SNAT6] as const) {
      const r = await gc.run({ map, nowNs, graceNs: opts.graceNs ?? DEFAULT_NAT_GC_GRACE_NS });
      out.scanned += r.scanned;
      out.removed += r.mappings;
      out.orphans += r.orphans;
    }
    return out;
  });
}
