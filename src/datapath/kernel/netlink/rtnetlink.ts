import { constants } from 'node:fs';
import { type FileHandle, open } from 'node:fs/promises';
import { validateAbsolutePath } from '../../../cni/names.js';
import { KernelError, errnoNumber, toKernelError } from '../errors.js';
import type { IpFamily } from '../../../netip/index.js';
import { type Address, decodeAddress, encodeListAddresses } from './addresses.js';
import type { NetlinkMessage } from './codec.js';
import { type RouteScopeName } from './constants.js';
import {
  type Link,
  type LinkChanges,
  type LinkRef,
  type VethSpec,
  type VxlanSpec,
  checkLinkRef,
  decodeLink,
  describeLink,
  encodeCreateVeth,
  encodeCreateVxlan,
  encodeDeleteLink,
  encodeGetLink,
  encodeListLinks,
} from './links.js';
import { type Neighbour, type NeighbourSpec, decodeNeighbour, encodeListNeighbours } from './neighbours.js';
import { type NetlinkBatch, item, ops } from './operations.js';
import { type Route, type RouteSpec, decodeRoute, encodeListRoutes } from './routes.js';
import { type BatchItem, MAX_BATCH, NetlinkSocket } from './socket.js';
import {
  type BpfFilter,
  type BpfFilterSpec,
  type Qdisc,
  type TcDirection,
  decodeBpfFilter,
  decodeQdisc,
  encodeAddBpfFilter,
  encodeAddClsact,
  encodeDeleteBpfFilter,
  encodeDeleteClsact,
  encodeListFilters,
  encodeListQdiscs,
} from './tc.js';

export interface NetlinkOpenOptions {
  /** Path of a network namespace file; absent: the agent's own namespace. */
  netns?: string;
  /** How long one kernel reply may take (ETIMEDOUT after). */
  timeoutMs?: number;
}

/** An address on a link given by name or index. */
export interface LinkAddressSpec {
  link: LinkRef;
  address: string;
  nodad?: boolean;
  scope?: RouteScopeName;
}

/** A route whose output device may be given by name. */
export type LinkRouteSpec = Omit<RouteSpec, 'oif'> & { link?: LinkRef };

export interface LinkNeighbourSpec extends Omit<NeighbourSpec, 'index'> {
  link: LinkRef;
}

export type LinkBpfFilterSpec = Omit<BpfFilterSpec, 'index'> & { link: LinkRef };

/**
 * Opens a namespace file for IFLA_NET_NS_FD. O_NONBLOCK: a FIFO planted at
 * the path opens at once (and the kernel then refuses the descriptor)
 * instead of hanging a pool thread.
 */
async function openNetnsFile(path: string): Promise<FileHandle> {
  validateAbsolutePath(path, 'netns path');
  try {
    return await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (err) {
    throw toKernelError(err, `open netns ${path}`);
  }
}

/**
 * rtnetlink in one network namespace: links, addresses, routes,
 * neighbours, clsact and cls_bpf filters. Every call is one request on the
 * namespace's socket (no process, no thread moved between namespaces), and
 * fails with a KernelError naming the operation. close() when done.
 */
export class Netlink {
  private constructor(private readonly socket: NetlinkSocket) {}

  static async open(opts: NetlinkOpenOptions = {}): Promise<Netlink> {
    return new Netlink(await NetlinkSocket.open(opts));
  }

  /** The namespace this handle works in (undefined: the agent's own). */
  get netns(): string | undefined {
    return this.socket.netns;
  }

  close(): Promise<void> {
    return this.socket.close();
  }

  private async run(i: BatchItem): Promise<NetlinkMessage[]> {
    return this.socket.request(i.message, i.operation);
  }

  /** Sends a batch in one round trip; throws the first failure after all ran. */
  async apply(batch: NetlinkBatch): Promise<void> {
    const results = await this.socket.batch(batch.items);
    const failed = results.find((r): r is KernelError => r instanceof KernelError);
    if (failed) throw failed;
  }

  /**
   * Sends a batch of any length, MAX_BATCH messages a round trip; each
   * message's outcome in order (undefined: done), so a caller knows which
   * of thousands of independent changes failed.
   */
  async applyEach(batch: NetlinkBatch): Promise<Array<KernelError | undefined>> {
    const out: Array<KernelError | undefined> = [];
    for (let i = 0; i < batch.items.length; i += MAX_BATCH) {
      for (const r of await this.socket.batch(batch.items.slice(i, i + MAX_BATCH))) out.push(r instanceof KernelError ? r : undefined);
    }
    return out;
  }

  // ---- links -----------------------------------------------------------------

  /** The link, or a KernelError (ENODEV when it does not exist). */
  async getLink(ref: LinkRef): Promise<Link> {
    const [m] = await this.run(item(encodeGetLink(ref), describeLink(ref)));
    if (!m) throw new KernelError(errnoNumber('ENODEV'), `RTM_GETLINK ${describeLink(ref)}`, 'no link in the reply');
    return decodeLink(m);
  }

  /** The link, or undefined when none has that name or index. */
  async findLink(ref: LinkRef): Promise<Link | undefined> {
    try {
      return await this.getLink(ref);
    } catch (err) {
      if (err instanceof KernelError && err.code === 'ENODEV') return undefined;
      throw err;
    }
  }

  async listLinks(): Promise<Link[]> {
    return (await this.socket.dump(encodeListLinks(), 'RTM_GETLINK dump')).map(decodeLink);
  }

  private async indexOf(ref: LinkRef): Promise<number> {
    checkLinkRef(ref);
    return typeof ref === 'number' ? ref : (await this.getLink(ref)).index;
  }

  /**
   * A veth pair; with `peer.netns` the peer is created directly in that
   * namespace under its final name (nothing with that name ever exists here).
   */
  async createVeth(spec: VethSpec): Promise<void> {
    const nsFile = spec.peer.netns === undefined ? undefined : await openNetnsFile(spec.peer.netns);
    try {
      const what = `${spec.name} veth peer ${spec.peer.name}${spec.peer.netns === undefined ? '' : ` in ${spec.peer.netns}`}`;
      await this.run(item(encodeCreateVeth(spec, nsFile?.fd), what));
    } finally {
      await nsFile?.close();
    }
  }

  /** A VXLAN device, by default in external (collect_md) mode without learning. */
  async createVxlan(spec: Omit<VxlanSpec, 'linkIndex'> & { dev?: LinkRef }): Promise<void> {
    const { dev, ...rest } = spec;
    const linkIndex = dev === undefined ? undefined : await this.indexOf(dev);
    await this.run(item(encodeCreateVxlan({ ...rest, ...(linkIndex === undefined ? {} : { linkIndex }) }), `${spec.name} vxlan`));
  }

  /** Changes state, MTU, MAC and/or name in one request (a rename looks the index up first). */
  async setLink(ref: LinkRef, changes: LinkChanges): Promise<void> {
    const target = changes.name !== undefined ? await this.indexOf(ref) : ref;
    await this.run(ops.setLink(target, changes));
  }

  setLinkUp(ref: LinkRef): Promise<void> {
    return this.setLink(ref, { up: true });
  }

  setLinkDown(ref: LinkRef): Promise<void> {
    return this.setLink(ref, { up: false });
  }

  setLinkMtu(ref: LinkRef, mtu: number): Promise<void> {
    return this.setLink(ref, { mtu });
  }

  setLinkMac(ref: LinkRef, mac: string): Promise<void> {
    return this.setLink(ref, { mac });
  }

  renameLink(ref: LinkRef, name: string): Promise<void> {
    return this.setLink(ref, { name });
  }

  /** Moves a link into another namespace (it goes down there; its addresses stay behind). */
  async moveLinkToNetns(ref: LinkRef, netns: string): Promise<void> {
    const nsFile = await openNetnsFile(netns);
    try {
      await this.run(ops.setLink(ref, {}, { fd: nsFile.fd, path: netns }));
    } finally {
      await nsFile.close();
    }
  }

  /** Deletes a link (a veth takes its peer with it); ENODEV when it does not exist. */
  async deleteLink(ref: LinkRef): Promise<void> {
    await this.run(item(encodeDeleteLink(ref), describeLink(ref)));
  }

  // ---- addresses -----------------------------------------------------------------

  private async addressSpec(spec: LinkAddressSpec) {
    const { link, ...rest } = spec;
    return { ...rest, index: await this.indexOf(link) };
  }

  /** Adds an address ("ip/len"); EEXIST when the link has it already. */
  async addAddress(spec: LinkAddressSpec): Promise<void> {
    await this.run(ops.addAddress(await this.addressSpec(spec)));
  }

  async replaceAddress(spec: LinkAddressSpec): Promise<void> {
    await this.run(ops.addAddress(await this.addressSpec(spec), true));
  }

  /** EADDRNOTAVAIL when the link does not have it. */
  async deleteAddress(spec: LinkAddressSpec): Promise<void> {
    await this.run(ops.deleteAddress(await this.addressSpec(spec)));
  }

  async listAddresses(filter: { link?: LinkRef; family?: IpFamily } = {}): Promise<Address[]> {
    const index = filter.link === undefined ? undefined : await this.indexOf(filter.link);
    const msgs = await this.socket.dump(encodeListAddresses({ family: filter.family, index }), `RTM_GETADDR dump${filter.link === undefined ? '' : ` ${describeLink(filter.link)}`}`);
    return msgs
      .map(decodeAddress)
      .filter((a): a is Address => a !== undefined)
      .filter((a) => index === undefined || a.index === index);
  }

  // ---- routes --------------------------------------------------------------------

  private async routeSpec(spec: LinkRouteSpec): Promise<RouteSpec> {
    const { link, ...rest } = spec;
    return link === undefined ? rest : { ...rest, oif: await this.indexOf(link) };
  }

  /** EEXIST when an equal route exists. */
  async addRoute(spec: LinkRouteSpec): Promise<void> {
    await this.run(ops.addRoute(await this.routeSpec(spec)));
  }

  async replaceRoute(spec: LinkRouteSpec): Promise<void> {
    await this.run(ops.addRoute(await this.routeSpec(spec), true));
  }

  /** ESRCH when no route matches. */
  async deleteRoute(spec: LinkRouteSpec): Promise<void> {
    await this.run(ops.deleteRoute(await this.routeSpec(spec)));
  }

  /** Routes of one family, of one table (every table unless given) and/or output link. */
  async listRoutes(filter: { family: IpFamily; table?: number; link?: LinkRef }): Promise<Route[]> {
    const oif = filter.link === undefined ? undefined : await this.indexOf(filter.link);
    const msgs = await this.socket.dump(encodeListRoutes({ family: filter.family, table: filter.table, oif }), `RTM_GETROUTE dump ipv${filter.family}`);
    return msgs
      .map(decodeRoute)
      .filter((r): r is Route => r !== undefined)
      .filter((r) => (filter.table === undefined || r.table === filter.table) && (oif === undefined || r.oif === oif));
  }

  // ---- neighbours ----------------------------------------------------------------

  private async neighbourSpec(spec: LinkNeighbourSpec): Promise<NeighbourSpec> {
    const { link, ...rest } = spec;
    return { ...rest, index: await this.indexOf(link) };
  }

  async addNeighbour(spec: LinkNeighbourSpec): Promise<void> {
    await this.run(ops.addNeighbour(await this.neighbourSpec(spec)));
  }

  async replaceNeighbour(spec: LinkNeighbourSpec): Promise<void> {
    await this.run(ops.addNeighbour(await this.neighbourSpec(spec), true));
  }

  /** ENOENT when there is no such entry. */
  async deleteNeighbour(spec: Omit<LinkNeighbourSpec, 'mac' | 'state'>): Promise<void> {
    await this.run(ops.deleteNeighbour(await this.neighbourSpec(spec)));
  }

  async listNeighbours(filter: { family?: IpFamily; link?: LinkRef; proxy?: boolean } = {}): Promise<Neighbour[]> {
    const index = filter.link === undefined ? undefined : await this.indexOf(filter.link);
    const msgs = await this.socket.dump(encodeListNeighbours({ family: filter.family, index, proxy: filter.proxy }), 'RTM_GETNEIGH dump');
    return msgs
      .map(decodeNeighbour)
      .filter((n): n is Neighbour => n !== undefined)
      .filter((n) => index === undefined || n.index === index);
  }

  // ---- tc --------------------------------------------------------------------------

  /** Adds the clsact qdisc (ingress and egress hooks for BPF); EEXIST when present. */
  async addClsact(link: LinkRef): Promise<void> {
    await this.run(item(encodeAddClsact(await this.indexOf(link)), `clsact ${describeLink(link)}`));
  }

  /** Removes clsact and every filter on it. */
  async deleteClsact(link: LinkRef): Promise<void> {
    await this.run(item(encodeDeleteClsact(await this.indexOf(link)), `clsact ${describeLink(link)}`));
  }

  async listQdiscs(link?: LinkRef): Promise<Qdisc[]> {
    const index = link === undefined ? undefined : await this.indexOf(link);
    const msgs = await this.socket.dump(encodeListQdiscs(index), 'RTM_GETQDISC dump');
    return msgs.map(decodeQdisc).filter((q) => index === undefined || q.index === index);
  }

  /** Attaches a loaded sched_cls program as a cls_bpf filter on a clsact hook. */
  async addBpfFilter(spec: LinkBpfFilterSpec): Promise<void> {
    const { link, ...rest } = spec;
    const index = await this.indexOf(link);
    await this.run(item(encodeAddBpfFilter({ ...rest, index }), `bpf ${spec.direction} ${describeLink(link)} prio ${spec.priority ?? 1}`));
  }

  /** ENOENT when there is no such filter. */
  async deleteBpfFilter(spec: { link: LinkRef; direction: TcDirection; priority: number; handle?: number }): Promise<void> {
    const index = await this.indexOf(spec.link);
    await this.run(item(encodeDeleteBpfFilter({ ...spec, index }), `bpf ${spec.direction} ${describeLink(spec.link)} prio ${spec.priority}`));
  }

  async listBpfFilters(link: LinkRef, direction: TcDirection): Promise<BpfFilter[]> {
    const index = await this.indexOf(link);
    const msgs = await this.socket.dump(encodeListFilters(index, direction), `RTM_GETTFILTER dump ${describeLink(link)} ${direction}`);
    return msgs.map((m) => decodeBpfFilter(m, direction)).filter((f): f is BpfFilter => f !== undefined);
  }
}
