/**
 * The node's devices (--devices, Cilium's flag): the interfaces traffic from
 * outside the node arrives on and pod traffic leaves by. Each gets
 * tendril_from_netdev on ingress (NodePort/externalIP load-balancing, SNAT
 * replies) and tendril_to_netdev on egress (masquerade), and an entry in
 * tendril_devices with its node address; lo gets tendril_to_lo on egress
 * (the node's own connections to a NodePort on one of its addresses).
 *
 * Without a configured list, every interface of the agent's namespace that
 * is up and has a global IPv4 address is one, except lo, tendril's own
 * devices and pods' host interfaces.
 */
import type { Logger } from '../../logging/logger.js';
import { parseIp } from '../../netip/index.js';
import type { Address, Link, Netlink } from '../kernel/netlink/index.js';
import { type BpfMap, type BpfProgram } from '../kernel/bpf/index.js';
import { kernel } from '../linux/kernel.js';
import { DatapathError } from '../types.js';
import { DeviceFlag } from './constants.js';
import type { DeviceInfoValue } from './layout.js';
import type { ProgramLinks } from './programLinks.js';

/** A node device as the datapath programs it. */
export interface NodeDevice {
  name: string;
  ifindex: number;
  mac: string;
  /** Its first global IPv4 address: the NodePort frontend and SNAT source on it. */
  ipv4: string;
  /** Its first global IPv6 address that is usable (not tentative, not deprecated): the IPv6 SNAT source (--ipv6-masquerade). */
  ipv6?: string;
}

/** Interfaces that are never node devices: tendril's own and pods' host ends. */
const NEVER_DEVICE = [/^lo$/, /^tendril_/, /^lxc/];

const RT_SCOPE_UNIVERSE = 0;
const NO_MAC = '00:00:00:00:00:00';
export const LOOPBACK = 'lo';

export interface DetectOptions {
  /** --devices: exactly these (each must exist and have a global IPv4 address); undefined = detect. */
  configured?: readonly string[];
  /** More interfaces that are not devices (adopted pods' host ends, whatever their names). */
  exclude?: (name: string) => boolean;
}

function firstGlobalIpv4(addresses: readonly Address[], index: number): string | undefined {
  return addresses.find((a) => a.index === index && a.family === 4 && a.scope === RT_SCOPE_UNIVERSE)?.ip;
}

/** IFA_F_TENTATIVE, IFA_F_DEPRECATED, IFA_F_DADFAILED: an address the kernel would not pick as a source. */
const UNUSABLE_IPV6 = 0x40 | 0x20 | 0x08;

function firstGlobalIpv6(addresses: readonly Address[], index: number): string | undefined {
  return addresses.find((a) => a.index === index && a.family === 6 && a.scope === RT_SCOPE_UNIVERSE && (a.flags & UNUSABLE_IPV6) === 0)?.ip;
}

/** The node devices of the namespace `nl` works in, sorted by name. */
export async function detectDevices(nl: Netlink, opts: DetectOptions = {}): Promise<NodeDevice[]> {
  const [links, addresses] = await kernel(() => Promise.all([nl.listLinks(), nl.listAddresses()]));
  const device = (l: Link, ipv4: string): NodeDevice => {
    const ipv6 = firstGlobalIpv6(addresses, l.index);
    return { name: l.name, ifindex: l.index, mac: l.mac === '' ? NO_MAC : l.mac, ipv4, ...(ipv6 !== undefined ? { ipv6 } : {}) };
  };
  if (opts.configured !== undefined) {
    const byName = new Map(links.map((l) => [l.name, l]));
    return opts.configured.map((name) => {
      const l = byName.get(name);
      if (!l) throw new DatapathError('not-found', `--devices names ${name}, which does not exist`);
      if (NEVER_DEVICE.some((re) => re.test(name))) throw new DatapathError('refused', `--devices names ${name}, which cannot be a node device (lo, tendril's own and pods' interfaces are not)`);
      const ipv4 = firstGlobalIpv4(addresses, l.index);
      if (ipv4 === undefined) throw new DatapathError('failed', `--devices names ${name}, which has no global IPv4 address`);
      return device(l, ipv4);
    });
  }
  const out: NodeDevice[] = [];
  for (const l of links) {
    if (!l.up || NEVER_DEVICE.some((re) => re.test(l.name)) || opts.exclude?.(l.name)) continue;
    // A bridge's or bond's port carries no address of its own: the master is the device.
    if (l.masterIndex !== undefined) continue;
    const ipv4 = firstGlobalIpv4(addresses, l.index);
    if (ipv4 !== undefined) out.push(device(l, ipv4));
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

export interface NodeDevicePrograms {
  fromNetdev: BpfProgram;
  toNetdev: BpfProgram;
  toLo: BpfProgram;
}

export interface NodeDevicesOptions {
  map: BpfMap<number, DeviceInfoValue>;
  links: ProgramLinks;
  programs: NodeDevicePrograms;
  netlink: () => Promise<Netlink>;
  log: Logger;
}

/** tendril_devices and the programs on the devices, kept in step with the device list. */
export class NodeDevices {
  /** Devices as the last sync programmed them. */
  #current: NodeDevice[] = [];

  constructor(private readonly opts: NodeDevicesOptions) {}

  get devices(): readonly NodeDevice[] {
    return this.#current;
  }

  /**
   * Programs `devices` (entries first, so the programs find their device
   * once attached), lo's egress, and takes entries and programs off devices
   * no longer in the list (a previous run's included).
   */
  async sync(devices: readonly NodeDevice[], masquerade: boolean): Promise<void> {
    const { map, links, programs, log } = this.opts;
    const flags = masquerade ? DeviceFlag.MASQUERADE : 0;
    const wanted = new Set(devices.map((d) => d.ifindex));
    try {
      for (const d of devices) map.set(d.ifindex, { ipv4: parseIp(d.ipv4), flags, mac: d.mac, ...(d.ipv6 !== undefined ? { ipv6: parseIp(d.ipv6) } : {}) });
    } catch (err) {
      throw new DatapathError('failed', `writing ${map.name} failed: ${(err as Error).message}`, [], '', { cause: err });
    }
    for (const d of devices) {
      if (!links.isAttached(d.name, d.ifindex)) await links.attach(d.name, d.ifindex, { ingress: programs.fromNetdev, egress: programs.toNetdev });
    }
    const nl = await this.opts.netlink();
    const lo = await kernel(() => nl.getLink(LOOPBACK));
    if (!links.isAttached(LOOPBACK, lo.index)) await links.attach(LOOPBACK, lo.index, { egress: programs.toLo });
    // Devices dropped from the list: their entry, then their programs (a device that went has no programs left).
    const stale: number[] = [];
    for await (const ifindex of map.keys()) if (!wanted.has(ifindex)) stale.push(ifindex);
    const previous = new Map(this.#current.map((d) => [d.ifindex, d.name]));
    for (const ifindex of stale) {
      map.delete(ifindex);
      const name = previous.get(ifindex) ?? (await kernel(() => nl.findLink(ifindex)))?.name;
      if (name !== undefined && !devices.some((d) => d.name === name)) await links.detach(name);
    }
    if (stale.length > 0) log.info({ ifindexes: stale }, 'took the datapath off devices no longer in --devices');
    this.#current = [...devices];
    log.info({ devices: devices.map((d) => `${d.name} ${d.ipv4}${d.ipv6 !== undefined ? ` ${d.ipv6}` : ''} (ifindex ${d.ifindex})`), masquerade }, 'node devices programmed');
  }
}
