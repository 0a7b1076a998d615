/**
 * Numeric identity constants shared with the eBPF C side. This file is the one
 * definition: bpf/lib/identity.h is meant to be generated from it
 * (renderIdentityHeader) and checked against it in a test, never edited by hand.
 *
 * Numbering follows Cilium (pkg/identity/numericidentity.go): reserved
 * identities 0..255, cluster-wide (global) identities 256..65535 allocated
 * through the kvstore, and node-local identities (CIDR) with bit 24 set.
 *
 * Choice: tendril follows newer Cilium and defines world-ipv4 (9) and
 * world-ipv6 (10). In a single-stack or pre-split view `reserved:world` (2)
 * is what traffic from outside the cluster gets; 9/10 are used only when the
 * datapath distinguishes the families (dual-stack with split world identities).
 */
export const ReservedIdentity = {
  Unknown: 0,
  Host: 1,
  World: 2,
  Unmanaged: 3,
  Health: 4,
  Init: 5,
  RemoteNode: 6,
  KubeApiserver: 7,
  Ingress: 8,
  WorldIpv4: 9,
  WorldIpv6: 10,
} as const;

export type ReservedIdentityNumber = (typeof ReservedIdentity)[keyof typeof ReservedIdentity];

/** Identities below this are reserved (Cilium: MinimalAllocationIdentity). */
export const MIN_GLOBAL_IDENTITY = 256;
/** Highest cluster-wide identity (Cilium's default MaximumAllocationIdentity, 16 bits). */
export const MAX_GLOBAL_IDENTITY = 65535;
/** Node-local identities (CIDR) carry this bit (Cilium: IdentityScopeLocal). */
export const LOCAL_IDENTITY_SCOPE = 1 << 24;
export const MIN_LOCAL_IDENTITY = LOCAL_IDENTITY_SCOPE + 1;
export const MAX_LOCAL_IDENTITY = LOCAL_IDENTITY_SCOPE + 0xffffff;
/** The mask the datapath applies to read an identity's scope. */
export const IDENTITY_SCOPE_MASK = 0xff000000;

/** C source for bpf/lib/identity.h, generated from the constants above. */
export function renderIdentityHeader(): string {
  const lines = [
    '/* SPDX-License-Identifier: Apache-2.0 */',
    '/* Generated from src/identity/constants.ts by renderIdentityHeader(); do not edit. */',
    '#ifndef __TENDRIL_LIB_IDENTITY_H_',
    '#define __TENDRIL_LIB_IDENTITY_H_',
    '',
  ];
  for (const [name, value] of Object.entries(ReservedIdentity)) {
    const macro = name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase();
    lines.push(`#define ${`IDENTITY_${macro}`.padEnd(32)} ${value}`);
  }
  lines.push(
    `#define ${'MIN_GLOBAL_IDENTITY'.padEnd(32)} ${MIN_GLOBAL_IDENTITY}`,
    `#define ${'MAX_GLOBAL_IDENTITY'.padEnd(32)} ${MAX_GLOBAL_IDENTITY}`,
    `#define ${'LOCAL_IDENTITY_SCOPE'.padEnd(32)} 0x${LOCAL_IDENTITY_SCOPE.toString(16)}`,
    `#define ${'IDENTITY_SCOPE_MASK'.padEnd(32)} 0x${IDENTITY_SCOPE_MASK.toString(16)}`,
    '',
    '#endif /* __TENDRIL_LIB_IDENTITY_H_ */',
    '',
  );
  return lines.join('\n');
}
