/**
 * layout.ts against the built objects: every codec has its C struct's size,
 * and each member of the struct is written by the codec exactly at the
 * member's BTF offset (probed: one field changed, the bytes that change
 * must fall inside that member). Also: the generated constants header is
 * renderDatapathHeader()'s text, and every object defines every map with
 * keys and values of the codecs' sizes.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parseIp, parsePrefix } from '../../netip/index.js';
import { type Codec, codec } from '../kernel/bpf/index.js';
import { LB_SRC_RANGE_KEY_FIXED_BITS, MapName, PrivateMapName, renderDatapathHeader } from './constants.js';
import {
  ct4Key,
  ct6Key,
  ctBudget,
  ctEntry,
  datapathConfig,
  NO_NAT_CONFIG,
  datapathEvent,
  type DatapathEvent,
  endpointInfo,
  endpointKey,
  EVENT_SIZE,
  deviceInfo,
  type DeviceInfoValue,
  frag4Key,
  frag4Ports,
  frag6Key,
  ipcacheKey,
  ipmasqKey,
  lb4AffinityKey,
  lb4AffinityValue,
  lb4Backend,
  lb4Key,
  lb4MemberKey,
  lbSourceRangeKey,
  lb4ReverseNat,
  lb4Service,
  lb6AffinityKey,
  lb6Backend,
  lb6Key,
  lb6ReverseNat,
  nat4Entry,
  nat4Key,
  nat6Entry,
  nat6Key,
  ipcacheValue,
  type IpcacheValue,
  metricsKey,
  metricsValue,
  policyEntry,
  policyKey,
} from './layout.js';
import { Btf } from './btf.js';
import { HOST_OBJECT, LXC_OBJECT, NETDEV_OBJECT, OVERLAY_OBJECT } from './testing/programHarness.js';

/** One struct member probed: `base` and `changed` differ in that member only. */
interface Probe<T> {
  base: T;
  changed: T;
}

interface StructCheck<T> {
  struct: string;
  codec: Codec<T>;
  /** Per C member; members named pad* are only covered by the size check. */
  probes: Record<string, Probe<T>>;
}

/** A probe that sets one field of a struct value to a non-zero value. */
function field<T extends object>(base: T, patch: Partial<T>): Probe<T> {
  return { base, changed: { ...base, ...patch } };
}

const v4zero = parseIp('0.0.0.0');
const mac0 = '00:00:00:00:00:00';

const epInfo = { ifindex: 0, identity: 0, endpointId: 0, flags: 0, lxcMac: mac0, podMac: mac0 };
const polKey = { endpointId: 0, identity: 0, egress: false, proto: 6, port: 0, portPrefixLen: 16 };
const ctKey0 = { saddr: v4zero, daddr: v4zero, sport: 0, dport: 0, proto: 0, flags: 0 };
const lb4Key0 = { address: v4zero, dport: 0, backendSlot: 0, proto: 0, scope: 0 };
const lb4Svc0 = { backendId: 0, affinityTimeout: 0, count: 0, revNatIndex: 0, flags: 0 };
const lb4Be0 = { address: v4zero, port: 0, proto: 0, state: 0 };
const nat4Key0 = { saddr: v4zero, daddr: v4zero, sport: 0, dport: 0, proto: 0, dir: 0 };
const nat4Entry0 = { createdNs: 0n, toAddr: v4zero, toPort: 0, flags: 0 };
const dev0: DeviceInfoValue = { ipv4: v4zero, flags: 0, mac: mac0 };
const nat6Key0 = { saddr: parseIp('::'), daddr: parseIp('::'), sport: 0, dport: 0, proto: 0, dir: 0 };
const nat6Entry0 = { createdNs: 0n, toAddr: parseIp('::'), toPort: 0, flags: 0 };
const ct0 = { expiresNs: 0n, packets: 0n, bytes: 0n, srcIdentity: 0, dstIdentity: 0, srcEndpoint: 0, dstEndpoint: 0, revNatIndex: 0, tcpFlags: 0, flags: 0, backendId: 0, natAddr: parseIp('0.0.0.0'), natPort: 0 };
const event0: DatapathEvent = {
  type: 0,
  subtype: 0,
  direction: 0,
  proto: 0,
  tcpFlags: 0,
  service: 0,
  ifindex: 0,
  srcIdentity: 0,
  dstIdentity: 0,
  srcEndpoint: 0,
  dstEndpoint: 0,
  cookie: 0,
  origLen: 0,
  sport: 0,
  dport: 0,
  saddr: v4zero,
  daddr: v4zero,
  tsNs: 0n,
};
const v6zero = parseIp('::');

const cfg0 = { traceLevel: 0, flags: 0, hostIfindex: 0, maglevTableSize: 0, tunnelIfindex: 0, nodeIpv4: 0, ...NO_NAT_CONFIG };

const CHECKS: Array<StructCheck<never>> = [
  {
    struct: 'endpoint_key',
    codec: endpointKey,
    probes: { ip: { base: v4zero, changed: parseIp('1.2.3.4') }, family: { base: v4zero, changed: v6zero } },
  },
  {
    struct: 'endpoint_info',
    codec: endpointInfo,
    probes: {
      ifindex: field(epInfo, { ifindex: 7 }),
      identity: field(epInfo, { identity: 7 }),
      endpoint_id: field(epInfo, { endpointId: 7 }),
      flags: field(epInfo, { flags: 1 }),
      lxc_mac: field(epInfo, { lxcMac: 'ff:ff:ff:ff:ff:ff' }),
      pod_mac: field(epInfo, { podMac: 'ff:ff:ff:ff:ff:ff' }),
    },
  },
  {
    struct: 'ipcache_key',
    codec: ipcacheKey,
    probes: {
      prefixlen: { base: parsePrefix('0.0.0.0/0'), changed: parsePrefix('0.0.0.0/8') },
      family: { base: parsePrefix('0.0.0.0/0'), changed: parsePrefix('::/0') },
      ip: { base: parsePrefix('0.0.0.0/32'), changed: parsePrefix('255.255.255.255/32') },
    },
  },
  {
    struct: 'remote_endpoint_info',
    codec: ipcacheValue,
    probes: {
      identity: field({ identity: 0, tunnelIp4: 0, flags: 0 }, { identity: 9 }),
      tunnel_ip4: field({ identity: 0, tunnelIp4: 0, flags: 0 }, { tunnelIp4: 0xffffffff }),
      flags: field({ identity: 0, tunnelIp4: 0, flags: 0 }, { flags: 1 }),
      tunnel_ip6: field<IpcacheValue>({ identity: 0, tunnelIp4: 0, flags: 0 }, { tunnelIp6: parseIp('ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff') }),
    },
  },
  {
    struct: 'policy_key',
    codec: policyKey,
    probes: {
      prefixlen: field(polKey, { portPrefixLen: 8 }),
      endpoint_id: field(polKey, { endpointId: 0xffffffff }),
      sec_identity: field(polKey, { identity: 0xffffffff }),
      egress: field(polKey, { egress: true }),
      protocol: field(polKey, { proto: 17 }),
      dport: field(polKey, { port: 0xffff }),
    },
  },
  {
    struct: 'policy_entry',
    codec: policyEntry,
    probes: {
      cookie: field({ cookie: 0, deny: 0, l4PrefixBits: 0 }, { cookie: 0xffffffff }),
      deny: field({ cookie: 0, deny: 0, l4PrefixBits: 0 }, { deny: 1 }),
      l4_prefix_bits: field({ cookie: 0, deny: 0, l4PrefixBits: 0 }, { l4PrefixBits: 24 }),
    },
  },
  {
    struct: 'ct4_key',
    codec: ct4Key,
    probes: {
      saddr: field(ctKey0, { saddr: parseIp('255.255.255.255') }),
      daddr: field(ctKey0, { daddr: parseIp('255.255.255.255') }),
      sport: field(ctKey0, { sport: 0xffff }),
      dport: field(ctKey0, { dport: 0xffff }),
      proto: field(ctKey0, { proto: 6 }),
      flags: field(ctKey0, { flags: 1 }),
    },
  },
  {
    struct: 'ct_entry',
    codec: ctEntry,
    probes: {
      expires_ns: field(ct0, { expiresNs: 0xffffffffffffffffn }),
      packets: field(ct0, { packets: 0xffffffffffffffffn }),
      bytes: field(ct0, { bytes: 0xffffffffffffffffn }),
      src_identity: field(ct0, { srcIdentity: 0xffffffff }),
      dst_identity: field(ct0, { dstIdentity: 0xffffffff }),
      src_endpoint: field(ct0, { srcEndpoint: 0xffffffff }),
      dst_endpoint: field(ct0, { dstEndpoint: 0xffffffff }),
      rev_nat_index: field(ct0, { revNatIndex: 0xffff }),
      tcp_flags: field(ct0, { tcpFlags: 0xff }),
      flags: field(ct0, { flags: 0xff }),
      backend_id: field(ct0, { backendId: 0xffffffff }),
      nat_addr: field(ct0, { natAddr: parseIp('255.255.255.255') }),
      nat_port: field(ct0, { natPort: 0xffff }),
    },
  },
  {
    struct: 'frag4_key',
    codec: frag4Key,
    probes: {
      saddr: field({ saddr: 0, daddr: 0, id: 0, proto: 0 }, { saddr: 0xffffffff }),
      daddr: field({ saddr: 0, daddr: 0, id: 0, proto: 0 }, { daddr: 0xffffffff }),
      id: field({ saddr: 0, daddr: 0, id: 0, proto: 0 }, { id: 0xffff }),
      proto: field({ saddr: 0, daddr: 0, id: 0, proto: 0 }, { proto: 17 }),
    },
  },
  {
    struct: 'frag4_ports',
    codec: frag4Ports,
    probes: { sport: field({ sport: 0, dport: 0 }, { sport: 0xffff }), dport: field({ sport: 0, dport: 0 }, { dport: 0xffff }) },
  },
  {
    struct: 'metrics_key',
    codec: metricsKey,
    probes: { reason: field({ reason: 0, direction: 0 }, { reason: 133 }), direction: field({ reason: 0, direction: 0 }, { direction: 2 }) },
  },
  {
    struct: 'metrics_value',
    codec: metricsValue,
    probes: { packets: field({ packets: 0n, bytes: 0n }, { packets: 1n << 63n }), bytes: field({ packets: 0n, bytes: 0n }, { bytes: 1n }) },
  },
  {
    struct: 'datapath_config',
    codec: datapathConfig,
    probes: {
      trace_level: field(cfg0, { traceLevel: 2 }),
      flags: field(cfg0, { flags: 1 }),
      host_ifindex: field(cfg0, { hostIfindex: 3 }),
      maglev_table_size: field(cfg0, { maglevTableSize: 16381 }),
      tunnel_ifindex: field(cfg0, { tunnelIfindex: 7 }),
      node_ipv4: field(cfg0, { nodeIpv4: 0x0a000001 }),
      nat_ports: field(cfg0, { natPorts: [{ min: 1024, max: 29999 }, { min: 61000, max: 65535 }] }),
      ct_endpoint_max: field(cfg0, { ctEndpointMax: 1 }),
      migration_until_ns: field(cfg0, { migrationUntilNs: 0xffffffffffffffffn }),
      node_ipv6: field(cfg0, { nodeIpv6: parseIp('fd00:248::11') }),
    },
  },
  {
    struct: 'tendril_event',
    codec: datapathEvent,
    probes: {
      type: field(event0, { type: 1 }),
      subtype: field(event0, { subtype: 133 }),
      direction: field(event0, { direction: 2 }),
      family: { base: event0, changed: { ...event0, saddr: v6zero, daddr: v6zero } },
      proto: field(event0, { proto: 6 }),
      tcp_flags: field(event0, { tcpFlags: 0x12 }),
      service: field(event0, { service: 0xffff }),
      ifindex: field(event0, { ifindex: 0xffffffff }),
      src_identity: field(event0, { srcIdentity: 0xffffffff }),
      dst_identity: field(event0, { dstIdentity: 0xffffffff }),
      src_endpoint: field(event0, { srcEndpoint: 0xffffffff }),
      dst_endpoint: field(event0, { dstEndpoint: 0xffffffff }),
      cookie: field(event0, { cookie: 0xffffffff }),
      orig_len: field(event0, { origLen: 0xffffffff }),
      sport: field(event0, { sport: 0xffff }),
      dport: field(event0, { dport: 0xffff }),
      saddr: field(event0, { saddr: parseIp('255.255.255.255') }),
      daddr: field(event0, { daddr: parseIp('255.255.255.255') }),
      ts_ns: field(event0, { tsNs: 0xffffffffffffffffn }),
    },
  },
  {
    struct: 'lb4_key',
    codec: lb4Key,
    probes: {
      address: field(lb4Key0, { address: parseIp('255.255.255.255') }),
      dport: field(lb4Key0, { dport: 0xffff }),
      backend_slot: field(lb4Key0, { backendSlot: 0xffff }),
      proto: field(lb4Key0, { proto: 0xff }),
      scope: field(lb4Key0, { scope: 0xff }),
    },
  },
  {
    struct: 'lb4_service',
    codec: lb4Service,
    probes: {
      backend_id: field(lb4Svc0, { backendId: 0xffffffff }),
      affinity_timeout: field(lb4Svc0, { affinityTimeout: 0xffffffff }),
      count: field(lb4Svc0, { count: 0xffff }),
      rev_nat_index: field(lb4Svc0, { revNatIndex: 0xffff }),
      flags: field(lb4Svc0, { flags: 0xff }),
    },
  },
  {
    struct: 'lb4_backend',
    codec: lb4Backend,
    probes: {
      address: field(lb4Be0, { address: parseIp('255.255.255.255') }),
      port: field(lb4Be0, { port: 0xffff }),
      proto: field(lb4Be0, { proto: 0xff }),
      state: field(lb4Be0, { state: 0xff }),
    },
  },
  {
    struct: 'lb4_reverse_nat',
    codec: lb4ReverseNat,
    probes: {
      address: field({ address: v4zero, port: 0 }, { address: parseIp('255.255.255.255') }),
      port: field({ address: v4zero, port: 0 }, { port: 0xffff }),
    },
  },
  {
    struct: 'lb4_affinity_key',
    codec: lb4AffinityKey,
    probes: {
      client: field({ client: v4zero, revNatIndex: 0 }, { client: parseIp('255.255.255.255') }),
      rev_nat_index: field({ client: v4zero, revNatIndex: 0 }, { revNatIndex: 0xffff }),
    },
  },
  {
    struct: 'lb4_member_key',
    codec: lb4MemberKey,
    probes: {
      rev_nat_index: field({ revNatIndex: 0, backendId: 0 }, { revNatIndex: 0xffff }),
      backend_id: field({ revNatIndex: 0, backendId: 0 }, { backendId: 0xffffffff }),
    },
  },
  {
    struct: 'lb4_affinity_value',
    codec: lb4AffinityValue,
    probes: {
      last_used_ns: field({ lastUsedNs: 0n, backendId: 0 }, { lastUsedNs: 0xffffffffffffffffn }),
      backend_id: field({ lastUsedNs: 0n, backendId: 0 }, { backendId: 0xffffffff }),
    },
  },
  {
    struct: 'nat4_key',
    codec: nat4Key,
    probes: {
      saddr: field(nat4Key0, { saddr: parseIp('255.255.255.255') }),
      daddr: field(nat4Key0, { daddr: parseIp('255.255.255.255') }),
      sport: field(nat4Key0, { sport: 0xffff }),
      dport: field(nat4Key0, { dport: 0xffff }),
      proto: field(nat4Key0, { proto: 0xff }),
      dir: field(nat4Key0, { dir: 0xff }),
    },
  },
  {
    struct: 'nat4_entry',
    codec: nat4Entry,
    probes: {
      created_ns: field(nat4Entry0, { createdNs: 0xffffffffffffffffn }),
      to_addr: field(nat4Entry0, { toAddr: parseIp('255.255.255.255') }),
      to_port: field(nat4Entry0, { toPort: 0xffff }),
      flags: field(nat4Entry0, { flags: 0xff }),
    },
  },
  {
    struct: 'ipmasq_key',
    codec: ipmasqKey,
    probes: {
      prefixlen: { base: parsePrefix('0.0.0.0/0'), changed: parsePrefix('0.0.0.0/1') },
      family: { base: parsePrefix('0.0.0.0/0'), changed: parsePrefix('::/0') },
      ip: { base: parsePrefix('0.0.0.0/32'), changed: parsePrefix('255.255.255.255/32') },
    },
  },
  {
    struct: 'device_info',
    codec: deviceInfo,
    probes: {
      ipv4: field(dev0, { ipv4: parseIp('255.255.255.255') }),
      flags: field(dev0, { flags: 0xffffffff }),
      mac: field(dev0, { mac: 'ff:ff:ff:ff:ff:ff' }),
      ipv6: field(dev0, { ipv6: parseIp('ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff') }),
    },
  },
  {
    struct: 'nat6_key',
    codec: nat6Key,
    probes: {
      saddr: field(nat6Key0, { saddr: parseIp('ffff::ffff') }),
      daddr: field(nat6Key0, { daddr: parseIp('ffff::ffff') }),
      sport: field(nat6Key0, { sport: 0xffff }),
      dport: field(nat6Key0, { dport: 0xffff }),
      proto: field(nat6Key0, { proto: 0xff }),
      dir: field(nat6Key0, { dir: 0xff }),
    },
  },
  {
    struct: 'nat6_entry',
    codec: nat6Entry,
    probes: {
      created_ns: field(nat6Entry0, { createdNs: 0xffffffffffffffffn }),
      to_addr: field(nat6Entry0, { toAddr: parseIp('ffff::ffff') }),
      to_port: field(nat6Entry0, { toPort: 0xffff }),
      flags: field(nat6Entry0, { flags: 0xff }),
    },
  },
] as unknown as Array<StructCheck<never>>;

/** Byte offsets where two encodings differ. */
function changedBytes<T>(c: Codec<T>, p: Probe<T>): number[] {
  const a = Buffer.alloc(c.size);
  const b = Buffer.alloc(c.size);
  c.write(p.base, a, 0);
  c.write(p.changed, b, 0);
  const out: number[] = [];
  for (let i = 0; i < c.size; i++) if (a[i] !== b[i]) out.push(i);
  return out;
}

const OBJECTS = { 'bpf_lxc.o': LXC_OBJECT, 'bpf_host.o': HOST_OBJECT, 'bpf_netdev.o': NETDEV_OBJECT, 'bpf_overlay.o': OVERLAY_OBJECT };

describe('datapath layouts against the objects\' BTF', () => {
  const btf = Object.fromEntries(Object.entries(OBJECTS).map(([name, path]) => [name, Btf.ofFile(path)]));

  for (const check of CHECKS) {
    it(`${check.struct}: size and every member's offset`, () => {
      const layout = btf['bpf_lxc.o']!.struct(check.struct);
      assert.ok(layout, `struct ${check.struct} is in bpf_lxc.o's BTF`);
      assert.equal(check.codec.size, layout.size, `codec size vs sizeof(struct ${check.struct})`);
      const probed = new Set(Object.keys(check.probes));
      for (const m of layout.members) {
        if (m.name.startsWith('pad')) continue;
        assert.ok(probed.has(m.name), `member ${check.struct}.${m.name} has no probe (a field the codec may not know)`);
        const changed = changedBytes(check.codec, check.probes[m.name]!);
        assert.ok(changed.length > 0, `${check.struct}.${m.name}: the probe changes no byte`);
        for (const off of changed) {
          assert.ok(off >= m.offset && off < m.offset + m.size, `${check.struct}.${m.name} is bytes ${m.offset}..${m.offset + m.size - 1}, the codec wrote byte ${off}`);
        }
        probed.delete(m.name);
      }
      assert.deepEqual([...probed], [], 'probes for members the struct does not have');
      // The other objects, where they have the struct, agree.
      for (const name of ['bpf_host.o', 'bpf_netdev.o', 'bpf_overlay.o']) {
        const other = btf[name]!.struct(check.struct);
        if (other) assert.deepEqual(other, layout, name);
      }
    });
  }

  it('a source range key holds the service ID and a prefix of either family, host bits cleared on the way back', () => {
    for (const text of ['203.0.113.0/24', '0.0.0.0/0', '2001:db8:1::/48', '192.0.2.7/32']) {
      const k = { serviceId: 4242, prefix: parsePrefix(text) };
      const b = Buffer.alloc(lbSourceRangeKey.size);
      lbSourceRangeKey.write(k, b, 0);
      assert.equal(b.readUInt32LE(0), LB_SRC_RANGE_KEY_FIXED_BITS + k.prefix.length, text);
      assert.deepEqual(lbSourceRangeKey.read(b, 0), k, text);
    }
  });

  it('the event record is EVENT_SIZE bytes and decodes what it encodes', () => {
    assert.equal(EVENT_SIZE, datapathEvent.size);
    const e: DatapathEvent = { ...event0, type: 1, subtype: 133, saddr: parseIp('10.0.0.1'), daddr: parseIp('10.0.0.2'), tsNs: 123456789n, sport: 80, dport: 443 };
    const b = Buffer.alloc(EVENT_SIZE);
    datapathEvent.write(e, b, 0);
    assert.deepEqual(datapathEvent.read(b, 0), e);
  });

  it('every object defines every map in MapName, with keys and values of the codecs\' sizes', () => {
    const sizes: Record<string, { key?: number; value?: number }> = {
      [MapName.ENDPOINTS]: { key: endpointKey.size, value: endpointInfo.size },
      [MapName.IPCACHE]: { key: ipcacheKey.size, value: ipcacheValue.size },
      [MapName.POLICY]: { key: policyKey.size, value: policyEntry.size },
      [MapName.CT_TCP]: { key: ct4Key.size, value: ctEntry.size },
      [MapName.CT_ANY]: { key: ct4Key.size, value: ctEntry.size },
      [MapName.FRAG]: { key: frag4Key.size, value: frag4Ports.size },
      [MapName.METRICS]: { key: metricsKey.size, value: metricsValue.size },
      [MapName.EVENTS]: {},
      [MapName.CONFIG]: { key: codec.u32.size, value: datapathConfig.size },
      [MapName.LB_SERVICES]: { key: lb4Key.size, value: lb4Service.size },
      [MapName.LB_BACKENDS]: { key: codec.u32.size, value: lb4Backend.size },
      [MapName.LB_REVNAT]: { key: codec.u16.size, value: lb4ReverseNat.size },
      [MapName.LB_AFFINITY]: { key: lb4AffinityKey.size, value: lb4AffinityValue.size },
      // A map of maps: its values are inner maps.
      [MapName.LB_MAGLEV]: { key: codec.u32.size },
      [MapName.LB_MEMBERS]: { key: lb4MemberKey.size, value: codec.u8.size },
      [MapName.LB_SOURCE_RANGES]: { key: lbSourceRangeKey.size, value: codec.u8.size },
      [MapName.SNAT]: { key: nat4Key.size, value: nat4Entry.size },
      [MapName.SNAT6]: { key: nat6Key.size, value: nat6Entry.size },
      [MapName.DEVICES]: { key: codec.u32.size, value: deviceInfo.size },
      [MapName.NO_MASQUERADE]: { key: ipmasqKey.size, value: codec.u8.size },
      [MapName.CT6_TCP]: { key: ct6Key.size, value: ctEntry.size },
      [MapName.CT6_ANY]: { key: ct6Key.size, value: ctEntry.size },
      [MapName.FRAG6]: { key: frag6Key.size, value: frag4Ports.size },
      [MapName.CT_BUDGET]: { key: codec.u32.size, value: ctBudget.size },
      [MapName.LB6_SERVICES]: { key: lb6Key.size, value: lb4Service.size },
      [MapName.LB6_BACKENDS]: { key: codec.u32.size, value: lb6Backend.size },
      [MapName.LB6_REVNAT]: { key: codec.u16.size, value: lb6ReverseNat.size },
      [MapName.LB6_AFFINITY]: { key: lb6AffinityKey.size, value: lb4AffinityValue.size },
    };
    assert.deepEqual(Object.keys(sizes).sort(), Object.values(MapName).sort());
    for (const [object, b] of Object.entries(btf)) {
      const maps = new Map(b.maps().map((m) => [m.name, m]));
      for (const [name, want] of Object.entries(sizes)) {
        const def = maps.get(name);
        assert.ok(def, `${object} defines ${name}`);
        assert.equal(def.key?.size, want.key, `${object} ${name} key size`);
        assert.equal(def.value?.size, want.value, `${object} ${name} value size`);
      }
      const known = [...Object.values(MapName), ...Object.values(PrivateMapName)] as string[];
      assert.deepEqual([...maps.keys()].filter((n) => !known.includes(n)), [], `${object} defines no map outside MapName and PrivateMapName`);
    }
  });

  it('build/bpf/include/tendril_constants.h is renderDatapathHeader()\'s text', () => {
    const path = fileURLToPath(new URL('../../../../build/bpf/include/tendril_constants.h', import.meta.url));
    assert.equal(readFileSync(path, 'utf8'), renderDatapathHeader());
  });
});
