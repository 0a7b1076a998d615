import { createHash } from 'node:crypto';
import { type CommandOptions, DatapathError, ip } from './command.js';

export interface LinkInfo {
  name: string;
  index: number;
  mac: string;
  mtu: number;
  up: boolean;
}

/** Host-side veth name: `lxc` + the first hex digits of sha256(container ID), 15 bytes in all. */
export function hostInterfaceName(containerId: string, ifName: string): string {
  // A second interface of one container needs its own name; eth0 keeps the plain form.
  const seed = ifName === 'eth0' ? containerId : `${containerId}/${ifName}`;
  return `lxc${createHash('sha256').update(seed).digest('hex').slice(0, 12)}`;
}

interface IpLinkJson {
  ifname: string;
  ifindex: number;
  address?: string;
  mtu: number;
  flags: string[];
}

/** A link's facts, or undefined when it does not exist. */
export async function getLink(name: string, opts: CommandOptions = {}): Promise<LinkInfo | undefined> {
  try {
    const out = await ip(['-j', 'link', 'show', 'dev', name], opts);
    const [l] = JSON.parse(out) as IpLinkJson[];
    if (!l) return undefined;
    return { name: l.ifname, index: l.ifindex, mac: l.address ?? '', mtu: l.mtu, up: l.flags.includes('UP') };
  } catch (err) {
    if (err instanceof DatapathError && err.kind === 'not-found') return undefined;
    throw err;
  }
}

/** Deletes a link; a missing link is not an error (teardown is idempotent). */
export async function deleteLink(name: string, opts: CommandOptions = {}): Promise<boolean> {
  try {
    await ip(['link', 'del', 'dev', name], opts);
    return true;
  } catch (err) {
    if (err instanceof DatapathError && (err.kind === 'not-found' || err.kind === 'netns-gone')) return false;
    throw err;
  }
}

export interface RouteJson {
  dst: string;
  gateway?: string;
  dev?: string;
  prefsrc?: string;
  scope?: string;
}

export async function listRoutes(family: 4 | 6, opts: CommandOptions = {}): Promise<RouteJson[]> {
  return JSON.parse(await ip([`-${family}`, '-j', 'route', 'show'], opts)) as RouteJson[];
}

export async function listAddresses(dev: string, opts: CommandOptions = {}): Promise<string[]> {
  const out = await ip(['-j', 'addr', 'show', 'dev', dev], opts);
  const parsed = JSON.parse(out) as Array<{ addr_info: Array<{ local: string; prefixlen: number }> }>;
  return parsed.flatMap((l) => l.addr_info.map((a) => `${a.local}/${a.prefixlen}`));
}
