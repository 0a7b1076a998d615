/**
 * Removes what a survey found, in an order where nothing is left dangling:
 * routes first (a service route points at tendril_host), then the devices
 * (the routes and programs on them go too), the nftables table, the pins
 * (pinned tcx links let go of the node devices' programs), the directories.
 * Each removal tolerates the thing being gone already, so a second run, or
 * one after a partial first, finishes the job.
 */
import { rm } from 'node:fs/promises';
import type { Netlink, Route } from '../../datapath/kernel/netlink/index.js';
import { isKernelError } from '../../datapath/kernel/errors.js';
import { removePinDir } from '../../datapath/kernel/bpf/bpffs.js';
import { runCommand } from '../../datapath/linux/command.js';
import { NFT_TABLE } from '../../datapath/linux/masquerade.js';
import { type NodeSurvey, TENDRIL_ROUTE_PROTOCOLS } from './nodeSurvey.js';

function describeRoute(r: Route): string {
  const parts = [r.dst];
  if (r.gateway !== undefined) parts.push(`via ${r.gateway}`);
  if (r.oif !== undefined) parts.push(`oif ${r.oif}`);
  parts.push(`table ${r.table}`, `proto ${r.protocol} (${TENDRIL_ROUTE_PROTOCOLS.get(r.protocol) ?? '?'})`);
  return parts.join(' ');
}

/** The listing printed before anything is removed, one line per item. */
export function formatSurvey(s: NodeSurvey): string[] {
  const lines: string[] = [];
  for (const r of s.routes) lines.push(`route      ${describeRoute(r)}`);
  for (const l of s.links) lines.push(`link       ${l.name} (${l.why})`);
  if (s.nftTable) lines.push(`nftables   table inet ${NFT_TABLE}`);
  if (s.pinDir !== undefined) lines.push(`bpf pins   ${s.pinDir}`);
  for (const d of s.dirs) lines.push(`directory  ${d}`);
  for (const k of s.kept) lines.push(`kept       ${k.name}: ${k.why}`);
  return lines;
}

export async function removeSurveyed(nl: Netlink, s: NodeSurvey): Promise<void> {
  for (const r of s.routes) {
    try {
      await nl.deleteRoute({ dst: r.dst, family: r.family, table: r.table, protocol: r.protocol, ...(r.gateway !== undefined ? { gateway: r.gateway } : {}), ...(r.oif !== undefined ? { link: r.oif } : {}), ...(r.priority !== undefined ? { priority: r.priority } : {}) });
    } catch (err) {
      // Gone already (its device went, or someone removed it): the goal is reached.
      if (!isKernelError(err, 'ESRCH', 'ENODEV')) throw err;
    }
  }
  for (const l of s.links) {
    try {
      await nl.deleteLink(l.index);
    } catch (err) {
      // Its peer's deletion took it along.
      if (!isKernelError(err, 'ENODEV')) throw err;
    }
  }
  if (s.nftTable) {
    // "add; delete" in one transaction: no error when the table went meanwhile.
    await runCommand(['nft', '-f', '-'], { input: `table inet ${NFT_TABLE}\ndelete table inet ${NFT_TABLE}\n` });
  }
  if (s.pinDir !== undefined) await removePinDir(s.pinDir);
  for (const d of s.dirs) await rm(d, { recursive: true, force: true });
}
