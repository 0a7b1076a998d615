/**
 * The underlay: the device that carries this node's traffic to the other
 * nodes (the one holding the node IP). Its MTU bounds the pod MTU (minus the
 * overlay's header in tunnel mode), so the agent reads it at start instead
 * of trusting a configured number. Read over netlink only.
 */
import { type Address, type Link, Netlink, RT_TABLE_MAIN } from '../kernel/netlink/index.js';
import { tryParseIp, formatIp } from '../../netip/index.js';
import { DatapathError } from '../types.js';
import { kernel, openPodNetlink } from './kernel.js';

export interface Underlay {
  device: string;
  ifindex: number;
  mtu: number;
  /** The address this node is reached at on it: the node IP when the device holds it, else the device's first global IPv4. */
  ip: string;
  /**
   * The device's first global IPv6 address, when `ip` is IPv4: the node's
   * second InternalIP, other nodes' next hop to its IPv6 pods.
   */
  ip6?: string;
}

export interface DetectUnderlayOptions {
  /** The node's IP (--node-ip, or the registry's InternalIP): the device holding it is the underlay. */
  nodeIp?: string;
  /** --devices: the first of them with a global IPv4 address, when no device holds the node IP. */
  devices?: readonly string[];
  /** The namespace to look in (path of its file); the caller's own unless given. */
  netns?: string;
}

const RT_SCOPE_UNIVERSE = 0;
/** Never the underlay: loopback, tendril's own devices and pods' host ends. */
const NEVER_UNDERLAY = [/^lo$/, /^tendril_/, /^lxc/];

function globalIpv4Of(addresses: readonly Address[], index: number): string | undefined {
  return addresses.find((a) => a.index === index && a.family === 4 && a.scope === RT_SCOPE_UNIVERSE)?.ip;
}

function globalIpv6Of(addresses: readonly Address[], index: number): string | undefined {
  return addresses.find((a) => a.index === index && a.family === 6 && a.scope === RT_SCOPE_UNIVERSE)?.ip;
}

/**
 * The underlay device, by the first rule that finds one: the link holding
 * `nodeIp`; the first of `devices` that exists with a global IPv4 address;
 * the IPv4 default route's device (the lowest metric); the first up
 * interface with a global IPv4 address other than lo, tendril_* and lxc*;
 * on a node with no global IPv4 address at all, the same three rules with
 * IPv6 (an IPv6-only node: its node IP is IPv6).
 * lo, tendril_* and lxc* are never the underlay, whatever the rule.
 * Undefined when none matches (a namespace with nothing but loopback).
 */
export async function detectUnderlay(o: DetectUnderlayOptions = {}): Promise<Underlay | undefined> {
  let nodeIp: string | undefined;
  if (o.nodeIp !== undefined) {
    const parsed = tryParseIp(o.nodeIp);
    if (parsed === undefined) throw new DatapathError('failed', `node IP ${JSON.stringify(o.nodeIp)} is not an IP address`);
    nodeIp = formatIp(parsed);
  }
  const nl = o.netns === undefined ? await kernel(() => Netlink.open()) : await openPodNetlink(o.netns);
  try {
    return await kernel(() => detectWith(nl, nodeIp, o.devices));
  } finally {
    await nl.close();
  }
}

async function detectWith(nl: Netlink, nodeIp: string | undefined, devices: readonly string[] | undefined): Promise<Underlay | undefined> {
  const [links, addresses] = await Promise.all([nl.listLinks(), nl.listAddresses()]);
  const byIndex = new Map(links.map((l) => [l.index, l]));
  const underlay = (l: Link, ip: string): Underlay => {
    const ip6 = tryParseIp(ip)?.family === 4 ? globalIpv6Of(addresses, l.index) : undefined;
    return { device: l.name, ifindex: l.index, mtu: l.mtu, ip, ...(ip6 === undefined ? {} : { ip6 }) };
  };
  // Whatever the rule, these never carry traffic to other nodes (a node IP on lo says nothing about the MTU).
  const candidate = (l: Link | undefined): l is Link => l !== undefined && !NEVER_UNDERLAY.some((re) => re.test(l.name));

  if (nodeIp !== undefined) {
    const held = addresses.find((a) => a.ip === nodeIp);
    const l = held && byIndex.get(held.index);
    if (candidate(l)) return underlay(l, nodeIp);
  }
  for (const name of devices ?? []) {
    const l = links.find((x) => x.name === name);
    const ip = candidate(l) ? globalIpv4Of(addresses, l.index) : undefined;
    if (l && ip !== undefined) return underlay(l, ip);
  }
  const defaults = (await nl.listRoutes({ family: 4, table: RT_TABLE_MAIN }))
    .filter((r) => r.dst === 'default' && r.oif !== undefined)
    .sort((a, b) => (a.priority ?? 0) - (b.priority ?? 0));
  for (const r of defaults) {
    const l = byIndex.get(r.oif!);
    const ip = candidate(l) ? (r.prefsrc ?? globalIpv4Of(addresses, l.index)) : undefined;
    if (l && ip !== undefined) return underlay(l, ip);
  }
  for (const l of links) {
    if (!l.up || !candidate(l)) continue;
    const ip = globalIpv4Of(addresses, l.index);
    if (ip !== undefined) return underlay(l, ip);
  }
  // No global IPv4 anywhere: an IPv6-only node. The same rules with IPv6 (--devices, default route, first up device).
  for (const name of devices ?? []) {
    const l = links.find((x) => x.name === name);
    const ip = candidate(l) ? globalIpv6Of(addresses, l.index) : undefined;
    if (l && ip !== undefined) return underlay(l, ip);
  }
  const defaults6 = (await nl.listRoutes({ family: 6, table: RT_TABLE_MAIN }))
    .filter((r) => r.dst === 'default' && r.oif !== undefined)
    .sort((a, b) => (a.priority ?? 0) - (b.priority ?? 0));
  for (const r of defaults6) {
    const l = byIndex.get(r.oif!);
    const ip = candidate(l) ? (r.prefsrc ?? globalIpv6Of(addresses, l.index)) : undefined;
    if (l && ip !== undefined) return underlay(l, ip);
  }
  for (const l of links) {
    if (!l.up || !candidate(l)) continue;
    const ip = globalIpv6Of(addresses, l.index);
    if (ip !== undefined) return underlay(l, ip);
  }
  return undefined;
}

/**
 * Whether `lo` is up in the caller's namespace. A namespace just made has it
 * down, and then the kernel has no routing table at all: every route dump
 * fails with "FIB table does not exist", which told a user nothing. The
 * agent asks this first, so the refusal names the cause and the fix.
 */
export async function loopbackUp(): Promise<boolean> {
  const nl = await kernel(() => Netlink.open());
  try {
    const lo = (await kernel(() => nl.listLinks())).find((l) => l.name === 'lo');
    return lo === undefined || lo.up;
  } finally {
    await nl.close();
  }
}
