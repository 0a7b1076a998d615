/**
 * Whether the host interface an endpoint record names belongs to that
 * attachment, asked of the kernel. A record is the agent's own file, but a
 * file is no proof: one edited (or damaged) to name the node's uplink would
 * have restore put pod routes and programs on it and a DELETE or `cleanup`
 * delete it. The rule is the one PUT /endpoint applies: an attachment owns
 * only a veth whose peer is its interface in its pod's namespace, and, when
 * tendril plumbed it, only the host name derived from its container ID and
 * interface name.
 */
import { CniError, validateInterfaceName } from '../../cni/index.js';
import type { Link, Netlink } from '../kernel/netlink/index.js';
import type { AttachmentOwnership, NetnsKind, RecordedAttachment } from '../types.js';
import { kernel, openPodNetlinkIfPresent } from './kernel.js';
import { hostInterfaceName } from './links.js';

function foreign(rec: RecordedAttachment, why: string): AttachmentOwnership {
  return { kind: 'foreign', reason: `the record names host interface ${rec.hostIfName}, ${why}` };
}

export async function attachmentOwnership(host: Netlink, rec: RecordedAttachment, classifyNetns: (path: string) => Promise<NetnsKind>): Promise<AttachmentOwnership> {
  const derived = hostInterfaceName(rec.containerId, rec.ifName);
  if (!rec.adopted && rec.hostIfName !== derived) return foreign(rec, `not ${derived}, the one derived from container ${rec.containerId} interface ${rec.ifName}`);
  try {
    validateInterfaceName(rec.hostIfName);
    validateInterfaceName(rec.ifName);
  } catch (err) {
    if (!(err instanceof CniError)) throw err;
    return foreign(rec, `which is no interface name: ${err.message}`);
  }
  const link = await kernel(() => host.findLink(rec.hostIfName));
  if (!link) return { kind: 'gone' };
  if (link.kind !== 'veth') return foreign(rec, `which is not a veth (${link.kind === undefined ? 'a device without a driver kind, such as a physical one' : `kind ${link.kind}`})`);
  // A veth pair within the node's namespace (tendril_host, a test's stand-in uplink) has no IFLA_LINK_NETNSID.
  if (link.linkNetnsId === undefined || link.linkIndex === undefined) return foreign(rec, 'whose veth peer is in the node\'s own namespace, not a pod\'s');
  const owned: AttachmentOwnership = { kind: 'owned', hostIfIndex: link.index, hostMac: link.mac };
  const kind = rec.netns === '' ? 'missing' : await classifyNetns(rec.netns);
  if (kind === 'node') return foreign(rec, `and ${rec.netns} is the node's own namespace, not a pod's`);
  if (kind === 'not-netns' || kind === 'unmounted') return foreign(rec, `and ${rec.netns} is not a network namespace`);
  if (kind === 'missing') {
    // The path is gone but the peer lives on outside the node's namespace (a runtime that
    // removed its bind mount early). The derived name is tendril's own; an adopted pair is not,
    // and nothing else can be checked of it.
    return rec.adopted ? foreign(rec, `and its pod's namespace ${rec.netns || '(none recorded)'} is gone, so its peer cannot be checked`) : owned;
  }
  const pod = await openPodNetlinkIfPresent(rec.netns);
  if (!pod) return rec.adopted ? foreign(rec, `and its pod's namespace ${rec.netns} is gone`) : owned;
  try {
    const peerIndex = link.linkIndex;
    const peer: Link | undefined = await kernel(() => pod.findLink(peerIndex));
    if (peer?.kind !== 'veth' || peer.linkIndex !== link.index || peer.linkNetnsId === undefined) return foreign(rec, `whose veth peer is not in ${rec.netns}`);
    if (peer.name !== rec.ifName) return foreign(rec, `whose peer in ${rec.netns} is ${peer.name}, not ${rec.ifName}`);
    return owned;
  } finally {
    await pod.close();
  }
}
