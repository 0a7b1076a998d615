import { z } from 'zod';
import { ipFamilyOf } from '../netip/index.js';
import { cidrFamily } from './ip.js';

const ipAddress = z.string().refine((s) => ipFamilyOf(s) !== 0, { message: 'must be an IP address' });
const cidr = z.string().refine((s) => cidrFamily(s) !== 0, { message: 'must be an address in CIDR notation' });

export const DnsSchema = z.looseObject({
  nameservers: z.array(z.string()).optional(),
  domain: z.string().optional(),
  search: z.array(z.string()).optional(),
  options: z.array(z.string()).optional(),
});
export type Dns = z.infer<typeof DnsSchema>;

// ---- results, one shape per family of spec versions --------------------------

/** A route as 0.x results carry it. */
export const RouteSchema = z.object({ dst: cidr, gw: ipAddress.optional() });
export type Route = z.infer<typeof RouteSchema>;

/** 0.1.0 and 0.2.0: at most one address per family. */
const IPConfig020Schema = z.object({
  ip: cidr,
  gateway: ipAddress.optional(),
  routes: z.array(RouteSchema).optional(),
});
export const Result020Schema = z.object({
  cniVersion: z.string(),
  ip4: IPConfig020Schema.optional(),
  ip6: IPConfig020Schema.optional(),
  dns: DnsSchema.optional(),
});
export type Result020 = z.infer<typeof Result020Schema>;

/** 0.3.0, 0.3.1 and 0.4.0: interfaces, and addresses tagged with their family. */
const Interface040Schema = z.object({
  name: z.string(),
  mac: z.string().optional(),
  sandbox: z.string().optional(),
});
const IPConfig040Schema = z.object({
  version: z.enum(['4', '6']),
  interface: z.number().int().nonnegative().optional(),
  address: cidr,
  gateway: ipAddress.optional(),
});
export const Result040Schema = z.object({
  cniVersion: z.string(),
  interfaces: z.array(Interface040Schema).optional(),
  ips: z.array(IPConfig040Schema).optional(),
  routes: z.array(RouteSchema).optional(),
  dns: DnsSchema.optional(),
});
export type Result040 = z.infer<typeof Result040Schema>;

/** 1.0.0 and 1.1.0: the family is implied by the address; 1.1.0 adds interface and route attributes. */
const Interface100Schema = z.object({
  name: z.string(),
  mac: z.string().optional(),
  mtu: z.number().int().nonnegative().optional(),
  sandbox: z.string().optional(),
  socketPath: z.string().optional(),
  pciID: z.string().optional(),
});
const IPConfig100Schema = z.object({
  interface: z.number().int().nonnegative().optional(),
  address: cidr,
  gateway: ipAddress.optional(),
});
const Route100Schema = z.object({
  dst: cidr,
  gw: ipAddress.optional(),
  mtu: z.number().int().nonnegative().optional(),
  advmss: z.number().int().nonnegative().optional(),
  priority: z.number().int().nonnegative().optional(),
  table: z.number().int().nonnegative().optional(),
  scope: z.number().int().nonnegative().optional(),
});
export const Result100Schema = z.object({
  cniVersion: z.string(),
  interfaces: z.array(Interface100Schema).optional(),
  ips: z.array(IPConfig100Schema).optional(),
  routes: z.array(Route100Schema).optional(),
  dns: DnsSchema.optional(),
});
export type Result100 = z.infer<typeof Result100Schema>;
export type Interface100 = z.infer<typeof Interface100Schema>;
export type IPConfig100 = z.infer<typeof IPConfig100Schema>;
export type Route100 = z.infer<typeof Route100Schema>;

/** The newest result shape, which everything is normalised to inside tendril. */
export type CurrentResult = Result100;

export type AnyResult = Result020 | Result040 | Result100;

/** The `cni.dev/valid-attachments` entries a GC call carries (spec 1.1.0). */
export interface GcAttachment {
  containerID: string;
  ifname: string;
}
