/**
 * The SNAT side of the node for bpf_netdev.o tests: the device the test
 * runs pretend to be (ifindex 1, the node address), the masquerade CIDRs
 * in tendril_ipmasq4, and typed access to tendril_snat4 with the two keys
 * of a mapping spelled out.
 */
import { formatIp, parseIp, parsePrefix } from '../../../netip/index.js';
import { codec, type BpfMap } from '../../kernel/bpf/index.js';
import { DeviceFlag, MapName, NAT_PORT_MAX, NAT_PORT_MIN, NatDirection } from '../constants.js';
import { deviceInfo, ipmasqKey, nat4Entry, nat4Key, type DeviceInfoValue, type Nat4EntryValue, type Nat4Key } from '../layout.js';
import { NODE_IP, TEST_IFINDEX } from './fixtures.js';
import type { ProgramHarness } from './programHarness.js';

export const NODE_MAC = '0a:00:00:00:ee:01';
/** The masquerade CIDRs the tests use: the pod CIDR of fixtures.ts and the remote node's. */
export const MASQUERADE_CIDRS = ['10.200.0.0/16', '10.201.0.0/16'] as const;

export interface NatTuple {
  saddr: string;
  daddr: string;
  sport: number;
  dport: number;
  proto: number;
}

/** A mapping's side as text, for assertions. */
export interface NatSide {
  toAddr: string;
  toPort: number;
  flags: number;
}

export class SnatNode {
  readonly snat: BpfMap<Nat4Key, Nat4EntryValue>;
  readonly devices: BpfMap<number, DeviceInfoValue>;
  readonly ipmasq: BpfMap<ReturnType<typeof ipmasqKey.read>, number>;

  constructor(readonly h: ProgramHarness) {
    this.snat = h.object.map(MapName.SNAT, nat4Key, nat4Entry);
    this.devices = h.object.map(MapName.DEVICES, codec.u32, deviceInfo);
    this.ipmasq = h.object.map(MapName.NO_MASQUERADE, ipmasqKey, codec.u8);
  }

  /** The test device (skb->ifindex of every test run) with the node address, masquerading unless told. */
  addDevice(opts: { masquerade?: boolean; ipv4?: string; ifindex?: number } = {}): void {
    this.devices.set(opts.ifindex ?? TEST_IFINDEX, {
      ipv4: parseIp(opts.ipv4 ?? NODE_IP),
      flags: opts.masquerade === false ? 0 : DeviceFlag.MASQUERADE,
      mac: NODE_MAC,
    });
  }

  addMasqueradeCidrs(cidrs: readonly string[] = MASQUERADE_CIDRS): void {
    for (const c of cidrs) this.ipmasq.set(parsePrefix(c), 1);
  }

  egressKey(t: NatTuple): Nat4Key {
    return { saddr: parseIp(t.saddr), daddr: parseIp(t.daddr), sport: t.sport, dport: t.dport, proto: t.proto, dir: NatDirection.EGRESS };
  }

  /** The key a reply of `t` after translation to (natAddr, natPort) finds. */
  ingressKey(t: NatTuple, natAddr: string, natPort: number): Nat4Key {
    return { saddr: parseIp(t.daddr), daddr: parseIp(natAddr), sport: t.dport, dport: natPort, proto: t.proto, dir: NatDirection.INGRESS };
  }

  egress(t: NatTuple): NatSide | undefined {
    return side(this.snat.get(this.egressKey(t)));
  }

  ingress(t: NatTuple, natAddr: string, natPort: number): NatSide | undefined {
    return side(this.snat.get(this.ingressKey(t, natAddr, natPort)));
  }

  /** Writes both sides of a mapping as the datapath would. */
  addMapping(t: NatTuple, natAddr: string, natPort: number, flags: number): void {
    const createdNs = process.hrtime.bigint();
    this.snat.set(this.egressKey(t), { createdNs, toAddr: parseIp(natAddr), toPort: natPort, flags });
    this.snat.set(this.ingressKey(t, natAddr, natPort), { createdNs, toAddr: parseIp(t.saddr), toPort: t.sport, flags });
  }

  /** Claims every port of the allocator for replies from (daddr, dport) to natAddr: no new flow there gets one. */
  async claimEveryPort(daddr: string, dport: number, proto: number, natAddr: string, flags: number, opts: { except?: number; createdNs?: bigint } = {}): Promise<number> {
    const entries: Array<[Nat4Key, Nat4EntryValue]> = [];
    // Held by flows just opened (no conntrack entry yet, inside the grace period): nothing SNAT may take.
    const createdNs = opts.createdNs ?? process.hrtime.bigint();
    for (let port = NAT_PORT_MIN; port <= NAT_PORT_MAX; port++) {
      if (port === opts.except) continue;
      entries.push([
        { saddr: parseIp(daddr), daddr: parseIp(natAddr), sport: dport, dport: port, proto, dir: NatDirection.INGRESS },
        { createdNs, toAddr: parseIp('10.200.99.99'), toPort: port, flags },
      ]);
    }
    await this.snat.setMany(entries, 'noexist');
    return entries.length;
  }

  async count(): Promise<number> {
    let n = 0;
    for await (const _ of this.snat.keys()) n++;
    return n;
  }
}

function side(e: Nat4EntryValue | undefined): NatSide | undefined {
  return e && { toAddr: formatIp(e.toAddr), toPort: e.toPort, flags: e.flags };
}
