import { type AddressSpec, encodeAddAddress, encodeDeleteAddress } from './addresses.js';
import type { MessageBuilder } from './codec.js';
import { messageTypeName } from './constants.js';
import { type LinkChanges, type LinkRef, describeLink, encodeSetLink } from './links.js';
import { type NeighbourSpec, encodeAddNeighbour, encodeDeleteNeighbour } from './neighbours.js';
import { type RouteSpec, describeRoute, encodeAddRoute, encodeDeleteRoute } from './routes.js';
import type { BatchItem } from './socket.js';

/**
 * Requests as (message, operation name) pairs, so one request and a batch
 * of them name their operations alike in errors ("RTM_NEWROUTE default via
 * 10.0.0.1 oif 7"). Everything here takes interface indexes: looking a name
 * up is a request of its own.
 */

export function item(message: MessageBuilder, what: string): BatchItem {
  return { message, operation: `${messageTypeName(message.type)} ${what}` };
}

function describeChanges(changes: LinkChanges): string {
  const parts: string[] = [];
  if (changes.up !== undefined) parts.push(changes.up ? 'up' : 'down');
  if (changes.mtu !== undefined) parts.push(`mtu ${changes.mtu}`);
  if (changes.mac !== undefined) parts.push(`address ${changes.mac}`);
  if (changes.name !== undefined) parts.push(`name ${changes.name}`);
  return parts.join(' ');
}

export const ops = {
  setLink(ref: LinkRef, changes: LinkChanges, netns?: { fd: number; path: string }): BatchItem {
    const what = [describeLink(ref), describeChanges(changes), netns ? `netns ${netns.path}` : ''].filter((s) => s !== '').join(' ');
    return item(encodeSetLink(ref, changes, netns?.fd), what);
  },
  addAddress(spec: AddressSpec, replace = false): BatchItem {
    return item(encodeAddAddress(spec, replace), `${spec.address} ifindex ${spec.index}`);
  },
  deleteAddress(spec: AddressSpec): BatchItem {
    return item(encodeDeleteAddress(spec), `${spec.address} ifindex ${spec.index}`);
  },
  addRoute(spec: RouteSpec, replace = false): BatchItem {
    return item(encodeAddRoute(spec, replace), describeRoute(spec));
  },
  deleteRoute(spec: RouteSpec): BatchItem {
    return item(encodeDeleteRoute(spec), describeRoute(spec));
  },
  addNeighbour(spec: NeighbourSpec, replace = false): BatchItem {
    return item(encodeAddNeighbour(spec, replace), `${spec.ip} ifindex ${spec.index}`);
  },
  deleteNeighbour(spec: NeighbourSpec): BatchItem {
    return item(encodeDeleteNeighbour(spec), `${spec.ip} ifindex ${spec.index}`);
  },
};

/**
 * Several changes sent in one datagram (one round trip). Build it with the
 * methods, then `Netlink.apply(batch)`. The kernel carries out every
 * message even after one fails; apply() then throws the first failure.
 */
export class NetlinkBatch {
  readonly items: BatchItem[] = [];

  setLink(ref: LinkRef, changes: LinkChanges): this {
    this.items.push(ops.setLink(ref, changes));
    return this;
  }

  addAddress(spec: AddressSpec): this {
    this.items.push(ops.addAddress(spec));
    return this;
  }

  replaceAddress(spec: AddressSpec): this {
    this.items.push(ops.addAddress(spec, true));
    return this;
  }

  deleteAddress(spec: AddressSpec): this {
    this.items.push(ops.deleteAddress(spec));
    return this;
  }

  addRoute(spec: RouteSpec): this {
    this.items.push(ops.addRoute(spec));
    return this;
  }

  replaceRoute(spec: RouteSpec): this {
    this.items.push(ops.addRoute(spec, true));
    return this;
  }

  deleteRoute(spec: RouteSpec): this {
    this.items.push(ops.deleteRoute(spec));
    return this;
  }

  addNeighbour(spec: NeighbourSpec): this {
    this.items.push(ops.addNeighbour(spec));
    return this;
  }

  replaceNeighbour(spec: NeighbourSpec): this {
    this.items.push(ops.addNeighbour(spec, true));
    return this;
  }
}
