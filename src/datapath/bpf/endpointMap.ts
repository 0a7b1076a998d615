/**
 * tendril_lxc: each local endpoint's addresses → its lxc device, MACs, ID and
 * identity. A shadow of which addresses each endpoint holds (loaded from the
 * pinned map at start) lets a sync delete exactly the addresses an endpoint
 * no longer has, and a teardown remove the endpoint without a map walk.
 */
import { formatIp, type IpAddress, parseIp } from '../../netip/index.js';
import { type BpfMap } from '../kernel/bpf/index.js';
import { DatapathError, type PodAddress } from '../types.js';
import { EndpointFlag } from './constants.js';
import { type EndpointInfoValue } from './layout.js';

const NO_MAC = '00:00:00:00:00:00';

export interface EndpointMapState {
  id: number;
  identity: number;
  ifindex: number;
  /** The lxc (host-side) device's MAC; empty when unknown. */
  lxcMac: string;
  /** The pod interface's MAC; empty when unknown (an adopted pod). */
  podMac: string;
  addresses: readonly PodAddress[];
  /** Staged policies select it: its staged view is in the policy map (EndpointFlag.STAGED). */
  staged?: boolean;
}

export class EndpointMap {
  /** endpoint ID → address text → the key. */
  readonly #byEndpoint = new Map<number, Map<string, IpAddress>>();
  /** endpoint ID → its lxc device's ifindex as the map holds it. */
  readonly #ifindex = new Map<number, number>();
  /** Endpoints whose entries carry EndpointFlag.STAGED. */
  readonly #staged = new Set<number>();

  private constructor(readonly map: BpfMap<IpAddress, EndpointInfoValue>) {}

  static async open(map: BpfMap<IpAddress, EndpointInfoValue>): Promise<EndpointMap> {
    const m = new EndpointMap(map);
    for await (const [ip, info] of map.entries()) {
      m.#addressesOf(info.endpointId).set(formatIp(ip), ip);
      m.#ifindex.set(info.endpointId, info.ifindex);
      if ((info.flags & EndpointFlag.STAGED) !== 0) m.#staged.add(info.endpointId);
    }
    return m;
  }

  #addressesOf(id: number): Map<string, IpAddress> {
    let s = this.#byEndpoint.get(id);
    if (!s) this.#byEndpoint.set(id, (s = new Map()));
    return s;
  }

  /** Endpoint IDs the map holds addresses for. */
  endpointIds(): number[] {
    return [...this.#byEndpoint.entries()].filter(([, s]) => s.size > 0).map(([id]) => id);
  }

  /** The lxc device's ifindex of an endpoint the map holds. */
  ifindexOf(endpointId: number): number | undefined {
    return this.#ifindex.get(endpointId);
  }

  /** Whether the endpoint's entries carry EndpointFlag.STAGED. */
  isStaged(endpointId: number): boolean {
    return this.#staged.has(endpointId);
  }

  /** The endpoint's addresses hold this state; addresses it no longer has are deleted. */
  sync(ep: EndpointMapState): void {
    const value: EndpointInfoValue = {
      ifindex: ep.ifindex,
      identity: ep.identity,
      endpointId: ep.id,
      flags: ep.staged === true ? EndpointFlag.STAGED : 0,
      lxcMac: ep.lxcMac === '' ? NO_MAC : ep.lxcMac,
      podMac: ep.podMac === '' ? NO_MAC : ep.podMac,
    };
    const held = this.#addressesOf(ep.id);
    const wanted = new Map<string, IpAddress>();
    for (const a of ep.addresses) {
      const ip = parseIp(a.ip);
      wanted.set(formatIp(ip), ip);
    }
    try {
      for (const ip of wanted.values()) this.map.set(ip, value);
      for (const [text, ip] of held) {
        if (wanted.has(text)) continue;
        // Only while the entry is still this endpoint's: another endpoint may hold the address now.
        if (this.map.get(ip)?.endpointId === ep.id) this.map.delete(ip);
      }
    } catch (err) {
      throw new DatapathError('failed', `endpoint ${ep.id}: writing ${this.map.name} failed: ${(err as Error).message}`, [], '', { cause: err });
    }
    for (const [text, ip] of wanted) held.set(text, ip);
    this.#ifindex.set(ep.id, ep.ifindex);
    if (ep.staged === true) this.#staged.add(ep.id);
    else this.#staged.delete(ep.id);
    for (const text of [...held.keys()]) if (!wanted.has(text)) held.delete(text);
    // An address that moved to this endpoint is no longer the previous holder's.
    for (const [id, addrs] of this.#byEndpoint) if (id !== ep.id) for (const text of wanted.keys()) addrs.delete(text);
  }

  /** Deletes the endpoint's addresses (those still naming it). */
  remove(endpointId: number): void {
    const held = this.#byEndpoint.get(endpointId);
    if (!held) return;
    try {
      for (const ip of held.values()) if (this.map.get(ip)?.endpointId === endpointId) this.map.delete(ip);
    } catch (err) {
      throw new DatapathError('failed', `endpoint ${endpointId}: deleting its ${this.map.name} entries failed: ${(err as Error).message}`, [], '', { cause: err });
    }
    this.#byEndpoint.delete(endpointId);
    this.#ifindex.delete(endpointId);
    this.#staged.delete(endpointId);
  }
}
