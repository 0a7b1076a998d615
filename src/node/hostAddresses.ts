import type { NodeNetworkSpec } from '../datapath/types.js';
import type { IpFamily } from '../netip/index.js';
import type { NodeAddressEntries } from '../ipcache/index.js';

export interface HostAddressesOptions {
  /** The node's own addresses in the ipcache (identity `host`). */
  entries: NodeAddressEntries;
  /** The node IP; 0.0.0.0 stands for "none yet". */
  nodeIp: string;
  /** Puts the router addresses on the host device (the datapath's setupNode). */
  setupNode: (routerAddresses: NodeNetworkSpec['routerAddresses']) => Promise<void>;
  /** Called after a router address was added (the node record names them). */
  changed: (why: string) => void;
}

/**
 * This node's own addresses: the router addresses the host device holds
 * (every pod's gateway), and with the node IP and the interfaces' addresses
 * the ipcache's identity `host`.
 */
export class HostAddresses {
  private readonly routers = new Map<string, { family: IpFamily; ip: string }>();

  constructor(private readonly o: HostAddressesOptions) {}

  /** The router addresses held now. */
  routerAddresses(): IterableIterator<string> {
    return this.routers.keys();
  }

  /** At start: IPAM's router addresses onto the host device. */
  async setRouters(routers: ReadonlyArray<{ family: IpFamily; ip: string }>): Promise<void> {
    for (const r of routers) this.routers.set(r.ip, r);
    await this.o.setupNode([...this.routers.values()]);
  }

  /** Router addresses, the node IP and the interfaces' addresses → ipcache identity `host` (at start). */
  async refresh(interfaceAddresses: () => Promise<string[]>): Promise<void> {
    const own = [...this.routers.keys(), ...(this.o.nodeIp !== '0.0.0.0' ? [this.o.nodeIp] : [])];
    this.o.entries.set([...own, ...(await interfaceAddresses())]);
  }

  /** A gateway the host device must hold (delegated IPAM's, a restored endpoint's). */
  async ensureRouter(family: IpFamily, ip: string): Promise<void> {
    if (this.routers.has(ip)) return;
    this.routers.set(ip, { family, ip });
    this.o.entries.add([ip]);
    await this.o.setupNode([...this.routers.values()]);
    this.o.changed('router address added');
  }
}
