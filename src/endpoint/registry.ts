import type { Endpoint } from './endpoint.js';
import { EndpointError, EndpointErrorCode } from './errors.js';

/** Endpoint IDs are 16-bit in Cilium's datapath; 0 is reserved. */
export const MAX_ENDPOINT_ID = 0xffff;

/** The API's endpoint reference forms. */
export const ENDPOINT_REF = /^(\d{1,5}|container-id:[A-Za-z0-9][A-Za-z0-9_.-]*|pod-name:[^:/\s]+:[^:/\s]+|ipv4:[0-9.]+|ipv6:[0-9a-fA-F:]+)$/;

/**
 * The in-memory registry of local endpoints: ID allocation and lookups by
 * ID, container ID (+ interface), pod name and IP. Duplicates are refused.
 * Only EndpointManager writes to it.
 */
export class EndpointRegistry {
  private readonly byId = new Map<number, Endpoint>();
  private nextId = 1;

  allocateId(): number {
    for (let i = 0; i < MAX_ENDPOINT_ID; i++) {
      const id = ((this.nextId - 1 + i) % MAX_ENDPOINT_ID) + 1;
      if (!this.byId.has(id)) {
        this.nextId = (id % MAX_ENDPOINT_ID) + 1;
        return id;
      }
    }
    throw new EndpointError(EndpointErrorCode.CONFLICT, 'no free endpoint ID');
  }

  register(ep: Endpoint): void {
    if (this.byId.has(ep.id)) throw new EndpointError(EndpointErrorCode.CONFLICT, `endpoint ID ${ep.id} already exists`);
    const clash = this.byContainer(ep.containerId, ep.ifName);
    if (clash) throw new EndpointError(EndpointErrorCode.CONFLICT, `container ${ep.containerId} interface ${ep.ifName} is already endpoint ${clash.id}`);
    for (const a of ep.addresses) {
      const owner = this.byIp(a.ip);
      if (owner) throw new EndpointError(EndpointErrorCode.CONFLICT, `address ${a.ip} already belongs to endpoint ${owner.id}`);
    }
    this.byId.set(ep.id, ep);
    if (ep.id >= this.nextId) this.nextId = (ep.id % MAX_ENDPOINT_ID) + 1;
  }

  update(ep: Endpoint): void {
    if (!this.byId.has(ep.id)) throw new EndpointError(EndpointErrorCode.NOT_FOUND, `endpoint ${ep.id} does not exist`);
    this.byId.set(ep.id, ep);
  }

  remove(id: number): Endpoint | undefined {
    const ep = this.byId.get(id);
    this.byId.delete(id);
    return ep;
  }

  get(id: number): Endpoint | undefined {
    return this.byId.get(id);
  }

  byContainer(containerId: string, ifName?: string): Endpoint | undefined {
    for (const ep of this.byId.values()) {
      if (ep.containerId === containerId && (ifName === undefined || ep.ifName === ifName)) return ep;
    }
    return undefined;
  }

  byPod(namespace: string, name: string): Endpoint | undefined {
    for (const ep of this.byId.values()) if (ep.podNamespace === namespace && ep.podName === name) return ep;
    return undefined;
  }

  byIp(ip: string): Endpoint | undefined {
    for (const ep of this.byId.values()) if (ep.addresses.some((a) => a.ip === ip)) return ep;
    return undefined;
  }

  /**
   * Resolves the API's endpoint ID forms: `<number>`, `container-id:<id>`,
   * `pod-name:<namespace>:<name>`, `ipv4:<ip>` / `ipv6:<ip>`.
   */
  lookup(ref: string): Endpoint | undefined {
    if (/^\d+$/.test(ref)) return this.get(Number(ref));
    const [kind, ...rest] = ref.split(':');
    const value = rest.join(':');
    switch (kind) {
      case 'container-id':
        return this.byContainer(value);
      case 'pod-name': {
        const i = value.indexOf(':');
        return i < 0 ? undefined : this.byPod(value.slice(0, i), value.slice(i + 1));
      }
      case 'ipv4':
      case 'ipv6':
        return this.byIp(value);
      default:
        return undefined;
    }
  }

  list(): Endpoint[] {
    return [...this.byId.values()].sort((a, b) => a.id - b.id);
  }

  get size(): number {
    return this.byId.size;
  }
}
