import { z } from 'zod';
import { IpamError, IpamErrorCode } from './errors.js';

/**
 * What IPAM stores in the kvstore, validated on every read: another agent (or
 * an older version of this one) wrote it, so it is outside input.
 *
 * Block (`blocks/<cidr>`): the allocation table of one CIDR — a Calico block,
 * or a whole per-node CIDR in host-scope / cluster-pool mode. Ordinals are
 * decimal strings because an IPv6 block may be larger than 2^53. `seq` grows
 * with every assignment and is recorded per address, so a release carrying an
 * old sequence number cannot free the address after it was re-used.
 */
const Ordinal = z.string().regex(/^\d+$/);

export const BlockRecordSchema = z.object({
  cidr: z.string(),
  pool: z.string(),
  /** Host the block is affine to; null when orphaned (its host was removed while it still held addresses). */
  affinity: z.string().nullable(),
  seq: z.number().int().nonnegative(),
  /** Where the next free-address search starts: round-robin, so a freed address is re-used last. */
  next: Ordinal,
  /** Inclusive ordinal ranges never handed out (network/broadcast, reserved CIDRs). */
  reserved: z.array(z.tuple([Ordinal, Ordinal])),
  allocs: z.record(Ordinal, z.object({ owner: z.string(), seq: z.number().int().nonnegative() })),
});
export type BlockRecord = z.infer<typeof BlockRecordSchema>;

/**
 * Affinity (`affinity/<host>/<cidr>`): the two-phase claim. A host writes it
 * `pending`, then takes the block by creating its key (or CAS on an orphaned
 * one), then flips it to `confirmed`. Only the block key decides ownership,
 * so two pending claims on one block cannot both win; a pending affinity left
 * by a crash is resolved on the next start.
 */
export const AffinityRecordSchema = z.object({
  state: z.enum(['pending', 'confirmed']),
  pool: z.string(),
  since: z.number(),
});
export type AffinityRecord = z.infer<typeof AffinityRecordSchema>;

export const HandleAddrSchema = z.object({
  family: z.union([z.literal(4), z.literal(6)]),
  ip: z.string(),
  cidr: z.string(),
  pool: z.string(),
  seq: z.number().int().nonnegative(),
  prefixLength: z.number().int(),
});
export type HandleAddr = z.infer<typeof HandleAddrSchema>;

/**
 * Handle (`handles/<owner>`): every address of one owner, written in the same
 * transaction as the blocks, so release-by-owner is one step and a crash can
 * never leave an address without its index entry.
 */
export const HandleRecordSchema = z.object({
  owner: z.string(),
  host: z.string(),
  addrs: z.array(HandleAddrSchema),
  /** Set while provisional; the same deadline is indexed under `expiry/<host>/<owner>`. */
  expiresAt: z.number().optional(),
});
export type HandleRecord = z.infer<typeof HandleRecordSchema>;

export function decode<T>(schema: z.ZodType<T>, key: string, value: string): T {
  let raw: unknown;
  try {
    raw = JSON.parse(value);
  } catch {
    throw new IpamError(IpamErrorCode.CONFLICT, `kvstore key ${key} does not hold JSON`);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    throw new IpamError(IpamErrorCode.CONFLICT, `kvstore key ${key} holds an unexpected record: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  }
  return parsed.data;
}

export function encode(value: unknown): string {
  return JSON.stringify(value);
}
