import { z } from 'zod';

/**
 * Endpoint states as Cilium names them (EndpointManager drives them):
 * waiting-for-identity (registered; labels → identity → ipcache → policy) →
 * waiting-to-regenerate (a regeneration is queued) → regenerating → ready, or
 * not-ready when a regeneration failed (the previous state stays in force
 * until one succeeds). A label change goes back to waiting-for-identity;
 * deletion is disconnecting until the endpoint is gone. `disconnected` is
 * never held by a live endpoint; older state files may carry it.
 */
export const ENDPOINT_STATES = ['waiting-for-identity', 'waiting-to-regenerate', 'regenerating', 'ready', 'not-ready', 'disconnecting', 'disconnected'] as const;
export type EndpointState = (typeof ENDPOINT_STATES)[number];

export const EndpointAddressSchema = z.object({
  family: z.union([z.literal(4), z.literal(6)]),
  ip: z.string(),
  gateway: z.string(),
  pool: z.string(),
  cidr: z.string(),
  /** The allocator's sequence number, so a stale release cannot free a re-used address. */
  seq: z.number().int().nonnegative(),
});
export type EndpointAddress = z.infer<typeof EndpointAddressSchema>;

/** The persisted endpoint model (`<state-dir>/endpoints/<id>/endpoint.json`). */
export const EndpointSchema = z.object({
  id: z.number().int().positive(),
  containerId: z.string(),
  ifName: z.string(),
  netns: z.string(),
  /**
   * The CNI network (the netconf's `name`) the endpoint was added to; CNI GC
   * acts only on its own network's endpoints. Absent for an adopted endpoint
   * and in records written before the field existed: GC never deletes those.
   */
  networkName: z.string().optional(),
  podNamespace: z.string().optional(),
  podName: z.string().optional(),
  /** Labels in `source:key=value` form: every label the endpoint carries. */
  labels: z.array(z.string()),
  /** Bumped whenever the labels change, so a stale label update can be told apart. */
  labelsRevision: z.number().int().nonnegative().optional(),
  /** The security identity resolved from the identity-relevant labels. */
  identity: z.number().int().nonnegative().optional(),
  /** The identity-relevant subset of `labels` the identity was derived from. */
  identityLabels: z.array(z.string()).optional(),
  addresses: z.array(EndpointAddressSchema),
  hostIfName: z.string(),
  /** Made of a veth pair someone else created (PUT /endpoint): its interfaces are not tendril's to delete. */
  adopted: z.boolean().optional(),
  hostIfIndex: z.number().int().nonnegative(),
  hostMac: z.string(),
  podMac: z.string(),
  mtu: z.number().int().positive(),
  state: z.enum(ENDPOINT_STATES),
  /** Whether the agent's IPAM owns the addresses (false: a delegated plugin does). */
  ipamOwned: z.boolean(),
  createdAt: z.string(),
});
export type Endpoint = z.infer<typeof EndpointSchema>;
