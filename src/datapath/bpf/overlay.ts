/**
 * tendril_vxlan, the overlay device of tunnel mode: one VXLAN device in
 * external (collect_md) mode, so each packet's tunnel metadata (set by the
 * programs: remote = the node the ipcache names, VNI = the source identity)
 * says where it goes, and the receiving side reads the VNI back in
 * tendril_from_overlay on the device's ingress. No FDB learning: the ipcache
 * is the only source of tunnel endpoints. In external mode the kernel opens
 * the device's UDP port on IPv4 and IPv6 alike, so one device serves nodes
 * on either underlay family (each packet's key says which).
 */
import type { Logger } from '../../logging/logger.js';
import type { BpfProgram } from '../kernel/bpf/index.js';
import { isKernelError } from '../kernel/errors.js';
import type { Link, Netlink } from '../kernel/netlink/index.js';
import { deleteLinkIfPresent, kernel } from '../linux/kernel.js';
import { getSysctl, interfaceSysctl, setSysctl } from '../linux/sysctl.js';
import { DatapathError } from '../types.js';
import type { ProgramLinks } from './programLinks.js';

export const TUNNEL_DEVICE = 'tendril_vxlan';

export interface TunnelDeviceOptions {
  netlink: () => Promise<Netlink>;
  links: ProgramLinks;
  log: Logger;
  /** The device's name; TUNNEL_DEVICE unless given. */
  name?: string;
}

export interface TunnelSpec {
  /** UDP port (--tunnel-port). */
  port: number;
  /** The pod MTU: what fits in the underlay with the overlay's header. */
  mtu: number;
  /** tendril_from_overlay, for the device's ingress. */
  program: BpfProgram;
}

/** Why an existing device of our name is not the one wanted; undefined when it is. */
function mismatch(link: Link, port: number): string | undefined {
  if (link.kind !== 'vxlan' || link.vxlan === undefined) return `it is ${link.kind === undefined ? 'not a virtual device' : `a ${link.kind} device`}, not vxlan`;
  const v = link.vxlan;
  if (!v.external) return 'it is not in external (collect_md) mode';
  if (v.port !== port) return `its UDP port is ${v.port}, not ${port}`;
  if (v.learning) return 'it learns FDB entries';
  if (v.linkIndex !== undefined || v.local !== undefined) return 'it is bound to an underlay device or address';
  return undefined;
}

export class TunnelDevice {
  readonly name: string;

  constructor(private readonly opts: TunnelDeviceOptions) {
    this.name = opts.name ?? TUNNEL_DEVICE;
  }

  /**
   * Makes the device what `spec` says (a device of the name that differs in
   * kind, mode, port or learning is replaced), up with the MTU, with its
   * sysctls, and the overlay program on its ingress; answers its ifindex.
   * Idempotent.
   */
  async ensure(spec: TunnelSpec): Promise<number> {
    const { links, log } = this.opts;
    const nl = await this.opts.netlink();
    let link = await kernel(() => nl.findLink(this.name));
    const why = link && mismatch(link, spec.port);
    if (link && why !== undefined) {
      log.info({ device: this.name, ifindex: link.index, why }, 'replacing the overlay device');
      await kernel(() => deleteLinkIfPresent(nl, link!.index));
      links.forget(this.name);
      link = undefined;
    }
    if (!link) link = await this.#create(nl, spec);
    const index = link.index;
    if (link.mtu !== spec.mtu || !link.up) await kernel(() => nl.setLink(index, { mtu: spec.mtu, up: true }));
    await this.#sysctls();
    if (!links.isAttached(this.name, index)) await links.attach(this.name, index, { ingress: spec.program });
    log.info({ device: this.name, ifindex: index, port: spec.port, mtu: spec.mtu }, 'overlay device ready');
    return index;
  }

  async #create(nl: Netlink, spec: TunnelSpec): Promise<Link> {
    try {
      await nl.createVxlan({ name: this.name, port: spec.port, external: true, learning: false, mtu: spec.mtu });
    } catch (err) {
      // EEXIST is also the kernel's answer when another external VXLAN device holds the port: told apart below.
      if (!isKernelError(err, 'EEXIST')) throw new DatapathError('failed', `creating ${this.name} on UDP port ${spec.port} failed: ${(err as Error).message}`, [], '', { cause: err });
    }
    const link = await kernel(() => nl.findLink(this.name));
    if (!link) throw new DatapathError('exists', `creating ${this.name} on UDP port ${spec.port} failed: another VXLAN device in external mode holds the port`);
    // Made by a concurrent start in between: checked like any existing device.
    const why = mismatch(link, spec.port);
    if (why !== undefined) throw new DatapathError('exists', `${this.name} exists and ${why}`);
    return link;
  }

  /**
   * Decapsulated packets for the node go to its stack with the inner source
   * (a remote pod, a remote node's router address), whose route leads to
   * tendril_host, not back out of this device, which has no address either:
   * reverse-path filtering, strict or loose, drops them. The kernel applies
   * the larger of the device's and `all`'s value, so `all` goes to 0 as
   * well (Cilium does the same); a changed `all` is logged.
   */
  async #sysctls(): Promise<void> {
    await setSysctl(interfaceSysctl(4, this.name, 'rp_filter'), '0');
    const all = await getSysctl('net/ipv4/conf/all/rp_filter').catch(() => '0');
    if (all !== '0') {
      await setSysctl('net/ipv4/conf/all/rp_filter', '0');
      this.opts.log.info({ device: this.name, was: all }, 'net.ipv4.conf.all.rp_filter set to 0: reverse-path filtering drops packets from remote pods to this node');
    }
  }

  /**
   * Removes the device and its program pins (native mode: what a
   * tunnel-mode run left); answers whether there was one.
   */
  async remove(): Promise<boolean> {
    const nl = await this.opts.netlink();
    const removed = await kernel(() => deleteLinkIfPresent(nl, this.name));
    this.opts.links.forget(this.name);
    return removed;
  }
}
