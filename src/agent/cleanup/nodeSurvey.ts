/**
 * What tendril-agent installed on this node, found without changing anything:
 * its devices, the pods' host interfaces its endpoint records name, routes
 * with tendril's rtm_protocols, the nftables table, the pin directory and the
 * state and lib dirs. `tendril-agent cleanup` lists this, then removes it.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { datapathPinDir } from '../../datapath/bpf/inspect.js';
import { TUNNEL_DEVICE } from '../../datapath/bpf/overlay.js';
import { SERVICE_ROUTE_PROTOCOL } from '../../datapath/bpf/serviceRoutes.js';
import { isKernelError } from '../../datapath/kernel/errors.js';
import type { Netlink, Route } from '../../datapath/kernel/netlink/index.js';
import { runCommand } from '../../datapath/linux/command.js';
import { HOST_DEVICE, HOST_PEER_DEVICE } from '../../datapath/linux/hostDevice.js';
import { NFT_TABLE } from '../../datapath/linux/masquerade.js';
import { NODE_ROUTE_PROTOCOL } from '../../datapath/linux/remoteNodeRoutes.js';
import { CniError, validateInterfaceName } from '../../cni/index.js';
import { attachmentOwnership } from '../../datapath/linux/attachmentOwnership.js';
import { hostInterfaceName, POD_HOST_IFNAME } from '../../datapath/linux/links.js';
import { classifyNetnsPath } from '../../datapath/linux/netnsKind.js';
import type { AttachmentOwnership, RecordedAttachment } from '../../datapath/types.js';
import { QUARANTINE_DIR } from '../../endpoint/endpointStore.js';

/** rtm_protocols only tendril's routes carry; pods' host routes ride on their devices and go with them. */
export const TENDRIL_ROUTE_PROTOCOLS: ReadonlyMap<number, string> = new Map([
  [SERVICE_ROUTE_PROTOCOL, 'service'],
  [NODE_ROUTE_PROTOCOL, 'remote node'],
]);

export interface CleanupPaths {
  stateDir: string;
  libDir: string;
  bpffsRoot: string;
}

export interface SurveyedLink {
  name: string;
  index: number;
  /** Why it is tendril's. */
  why: string;
}

/** A pod interface an endpoint record names that stays: the record says someone else made it, or it is no veth. */
export interface KeptLink {
  name: string;
  why: string;
}

export interface NodeSurvey {
  routes: Route[];
  /** In removal order: the tunnel, the pods' host interfaces, the host pair. */
  links: SurveyedLink[];
  kept: KeptLink[];
  nftTable: boolean;
  /** The pin directory, when it exists. */
  pinDir?: string;
  /** The state and lib dirs that exist. */
  dirs: string[];
}

interface RecordedInterface {
  /** What the record says of its attachment, as far as it is legible. */
  attachment: Partial<RecordedAttachment>;
  adopted: boolean;
  source: string;
}

/** A string field of a JSON object as far as damaged text still holds it. */
function legible(text: string, field: string): string | undefined {
  return new RegExp(`"${field}"\\s*:\\s*"([A-Za-z0-9_.:@/-]{1,4096})"`).exec(text)?.[1];
}

/** The attachments the state dir's endpoint records (quarantined ones included, as far as legible) name. */
export async function recordedInterfaces(stateDir: string): Promise<RecordedInterface[]> {
  const dir = join(stateDir, 'endpoints');
  const out: RecordedInterface[] = [];
  for (const entry of await readdir(dir).catch(() => [])) {
    if (entry === QUARANTINE_DIR) continue;
    const text = await readFile(join(dir, entry, 'endpoint.json'), 'utf8').catch(() => undefined);
    const rec = text === undefined ? undefined : parseRecord(text);
    if (rec) out.push({ ...rec, source: `endpoint ${entry}` });
  }
  const quarantine = join(dir, QUARANTINE_DIR);
  for (const entry of await readdir(quarantine).catch(() => [])) {
    const text = (await readFile(join(quarantine, entry, 'endpoint.json'), 'utf8').catch(() => undefined)) ?? (await readFile(join(quarantine, entry), 'utf8').catch(() => ''));
    // A damaged record: only what is legible, and never one it says was adopted.
    const attachment: Partial<RecordedAttachment> = {};
    for (const field of ['containerId', 'ifName', 'netns', 'hostIfName'] as const) {
      const v = legible(text, field);
      if (v !== undefined) attachment[field] = v;
    }
    if (attachment.containerId !== undefined || attachment.hostIfName !== undefined) out.push({ attachment, adopted: /"adopted"\s*:\s*true/.test(text), source: `quarantined record ${entry}` });
  }
  return out;
}

function parseRecord(text: string): { attachment: Partial<RecordedAttachment>; adopted: boolean } | undefined {
  try {
    const r = JSON.parse(text) as Record<string, unknown>;
    const attachment: Partial<RecordedAttachment> = {};
    for (const field of ['containerId', 'ifName', 'netns', 'hostIfName'] as const) if (typeof r[field] === 'string') attachment[field] = r[field];
    return { attachment, adopted: r.adopted === true };
  } catch {
    return undefined;
  }
}

/** Whether a record's text names something the kernel could call an interface (a damaged one may not). */
function isInterfaceName(name: string): boolean {
  try {
    validateInterfaceName(name);
    return true;
  } catch (err) {
    if (err instanceof CniError) return false;
    throw err;
  }
}

/** For a record with no legible attachment: an lxc-named veth whose peer is outside the node's namespace. */
async function peerOutsideNode(nl: Netlink, name: string): Promise<AttachmentOwnership> {
  const link = await nl.findLink(name);
  if (!link) return { kind: 'gone' };
  return link.kind === 'veth' && link.linkNetnsId !== undefined ? { kind: 'owned', hostIfIndex: link.index, hostMac: link.mac } : { kind: 'foreign', reason: `${name} is not a veth into a pod's namespace` };
}

/**
 * The pod interface a record lets cleanup delete, by the rule restore
 * applies (attachmentOwnership.ts): the host name derived from the record's
 * attachment, a veth whose peer is its interface in its pod's namespace. A
 * record that names any other interface (the uplink, say) only gets that
 * interface listed as kept.
 */
async function recordedLink(nl: Netlink, rec: RecordedInterface, links: SurveyedLink[], kept: KeptLink[], seen: Set<string>): Promise<void> {
  const { containerId, hostIfName } = rec.attachment;
  const ifName = rec.attachment.ifName ?? 'eth0';
  // A damaged record whose container ID is illegible: only a name of tendril's own form can be its.
  const derived = containerId === undefined ? (hostIfName !== undefined && POD_HOST_IFNAME.test(hostIfName) ? hostIfName : undefined) : hostInterfaceName(containerId, ifName);
  if (hostIfName !== undefined && hostIfName !== derived && !seen.has(hostIfName) && isInterfaceName(hostIfName)) {
    const named = await nl.findLink(hostIfName);
    if (named) {
      seen.add(hostIfName);
      kept.push({ name: hostIfName, why: rec.adopted ? `${rec.source} adopted it: its veth pair is not tendril's` : `${rec.source} names it, but it is not the interface derived from its attachment (${derived ?? 'no container ID legible'})` });
    }
  }
  if (derived === undefined || seen.has(derived) || (rec.adopted && hostIfName !== derived)) return;
  const ownership =
    containerId === undefined
      ? await peerOutsideNode(nl, derived)
      : await attachmentOwnership(nl, { containerId, ifName, netns: rec.attachment.netns ?? '', hostIfName: derived }, classifyNetnsPath);
  if (ownership.kind === 'gone') return;
  seen.add(derived);
  const link = await nl.findLink(derived);
  if (!link) return;
  if (rec.adopted) kept.push({ name: derived, why: `${rec.source} adopted it: its veth pair is not tendril's` });
  else if (ownership.kind === 'foreign') kept.push({ name: derived, why: `${rec.source}: ${ownership.reason}` });
  else links.push({ name: link.name, index: link.index, why: `pod host interface (${rec.source})` });
}

/** Whether nftables holds tendril's table; false too when nft is not installed (then there is none to remove). */
export async function hasNftTable(): Promise<boolean> {
  try {
    await runCommand(['nft', 'list', 'table', 'inet', NFT_TABLE]);
    return true;
  } catch {
    return false;
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

export async function surveyNode(nl: Netlink, paths: CleanupPaths): Promise<NodeSurvey> {
  const routes: Route[] = [];
  for (const family of [4, 6] as const) {
    // A kernel without IPv6 has no IPv6 routes of anyone's.
    const all = await nl.listRoutes({ family }).catch((err: unknown) => {
      if (family === 6 && isKernelError(err, 'EAFNOSUPPORT')) return [];
      throw err;
    });
    routes.push(...all.filter((r) => TENDRIL_ROUTE_PROTOCOLS.has(r.protocol)));
  }
  const links: SurveyedLink[] = [];
  const kept: KeptLink[] = [];
  const tunnel = await nl.findLink(TUNNEL_DEVICE);
  if (tunnel?.kind === 'vxlan') links.push({ name: tunnel.name, index: tunnel.index, why: 'the overlay device' });
  const seen = new Set<string>();
  for (const rec of await recordedInterfaces(paths.stateDir)) await recordedLink(nl, rec, links, kept, seen);
  const host = await nl.findLink(HOST_DEVICE);
  if (host?.kind === 'veth') links.push({ name: host.name, index: host.index, why: `host device (${HOST_PEER_DEVICE} goes with it)` });
  else {
    const peer = await nl.findLink(HOST_PEER_DEVICE);
    if (peer?.kind === 'veth') links.push({ name: peer.name, index: peer.index, why: 'host device peer' });
  }
  const pinDir = datapathPinDir(paths.bpffsRoot);
  const dirs: string[] = [];
  for (const d of [paths.stateDir, paths.libDir]) if (!dirs.includes(d) && (await exists(d))) dirs.push(d);
  return { routes, links, kept, nftTable: await hasNftTable(), ...((await exists(pinDir)) ? { pinDir } : {}), dirs };
}

/** Whether the survey found anything to remove. */
export function surveyIsEmpty(s: NodeSurvey): boolean {
  return s.routes.length === 0 && s.links.length === 0 && !s.nftTable && s.pinDir === undefined && s.dirs.length === 0;
}
