/**
 * The node the program tests pretend to be: two local pods (A, B) on the
 * loopback device (BPF_PROG_TEST_RUN runs with skb->ifindex = 1), one local
 * pod on another device (C), the router address, the node's own address,
 * a remote pod and CIDR identities in the ipcache.
 */
import { parseIp } from '../../../netip/index.js';
import { CtFlag, EndpointFlag } from '../constants.js';
import type { CtEntryValue } from '../layout.js';
import type { ProgramHarness, TestEndpoint } from './programHarness.js';

/** BPF_PROG_TEST_RUN's skb->ifindex without a ctx: the loopback device. */
export const TEST_IFINDEX = 1;

export const IDENTITY = {
  HOST: 1,
  WORLD: 2,
  /** An IPv6 address outside the ipcache (IPv4's are the family-free WORLD). */
  WORLD_IPV6: 10,
  A: 1000,
  B: 2000,
  C: 3000,
  REMOTE: 4000,
  /** Local-scope CIDR identities (LOCAL_IDENTITY_SCOPE | n). */
  CIDR_24: 0x1000001,
  CIDR_25: 0x1000002,
} as const;

export const POD_A: TestEndpoint = {
  ip: '10.200.0.10',
  ifindex: TEST_IFINDEX,
  identity: IDENTITY.A,
  endpointId: 11,
  lxcMac: '0a:00:00:00:0a:01',
  podMac: '0a:00:00:00:0a:02',
};

export const POD_B: TestEndpoint = {
  ip: '10.200.0.20',
  ifindex: TEST_IFINDEX,
  identity: IDENTITY.B,
  endpointId: 22,
  lxcMac: '0a:00:00:00:0b:01',
  podMac: '0a:00:00:00:0b:02',
};

/** A pod on another device: a packet with its address arriving here is spoofed. */
export const POD_C: TestEndpoint = {
  ip: '10.200.0.30',
  ifindex: 77,
  identity: IDENTITY.C,
  endpointId: 33,
  lxcMac: '0a:00:00:00:0c:01',
  podMac: '0a:00:00:00:0c:02',
};

/** The router address (every pod's gateway) as the agent lists it in tendril_lxc. */
export const ROUTER: TestEndpoint = {
  ip: '10.200.0.1',
  ifindex: 5,
  identity: IDENTITY.HOST,
  endpointId: 0,
  flags: EndpointFlag.HOST,
  lxcMac: '0a:00:00:00:01:01',
  podMac: '0a:00:00:00:01:01',
};

export const NODE_IP = '192.168.77.5';
export const REMOTE_POD_IP = '10.201.0.5';
export const CIDR_24 = '203.0.113.0/24';
export const CIDR_25 = '203.0.113.128/25';
export const WORLD_IP = '198.51.100.9';

export function installNode(h: ProgramHarness): void {
  for (const ep of [POD_A, POD_B, POD_C, ROUTER]) h.addEndpoint(ep);
  h.addIpcache(POD_A.ip, IDENTITY.A);
  h.addIpcache(POD_B.ip, IDENTITY.B);
  h.addIpcache(POD_C.ip, IDENTITY.C);
  h.addIpcache(ROUTER.ip, IDENTITY.HOST);
  h.addIpcache(NODE_IP, IDENTITY.HOST);
  h.addIpcache(REMOTE_POD_IP, IDENTITY.REMOTE);
  h.addIpcache(CIDR_24, IDENTITY.CIDR_24);
  h.addIpcache(CIDR_25, IDENTITY.CIDR_25);
}

/**
 * A conntrack entry as the programs leave one for POD_A's flow to the world
 * that saw its reply: live for an hour, SYN and ACK seen; `over` changes
 * any field.
 */
export function ctEntryOf(over: Partial<CtEntryValue> = {}): CtEntryValue {
  return {
    expiresNs: process.hrtime.bigint() + 3600_000_000_000n,
    packets: 3n,
    bytes: 180n,
    srcIdentity: POD_A.identity,
    dstIdentity: IDENTITY.WORLD,
    srcEndpoint: POD_A.endpointId,
    dstEndpoint: 0,
    revNatIndex: 0,
    tcpFlags: 0x12, // SYN | ACK
    flags: CtFlag.REPLY_SEEN,
    backendId: 0,
    natAddr: parseIp('0.0.0.0'),
    natPort: 0,
    ...over,
  };
}
