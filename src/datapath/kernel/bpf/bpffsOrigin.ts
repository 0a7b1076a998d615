/**
 * Whether the bpffs the agent pins into is the node's. Pins are what keep
 * programs and maps (NodePort filters, conntrack) alive while the agent is
 * stopped and what a restart reuses; on a bpffs private to the agent's
 * mount namespace they vanish with its last process. `ip netns exec` is the
 * usual cause: it gives the command a mount namespace of its own with a
 * fresh /sys, so /sys/fs/bpf is a new, empty bpffs.
 *
 * A bpffs instance is one superblock, named by its device number in
 * mountinfo (`0:NN`), wherever and however often it is mounted. The agent's
 * bpffs is the node's when pid 1 has the same instance mounted. That holds
 * in a container whose /sys/fs/bpf is the host's, bind-mounted (same
 * superblock), so that case is not flagged; a different mount namespace
 * alone is not a problem and is only reported.
 */
import { readFile, readlink, stat } from 'node:fs/promises';

export interface BpffsOrigin {
  /** The bpffs root the agent pins under. */
  root: string;
  /**
   * `node`: pid 1 has the same bpffs instance mounted; `private`: it has not
   * (pins vanish when the agent's mount namespace goes); `unknown`: pid 1's
   * mounts could not be read (then `detail` says why).
   */
  sharing: 'node' | 'private' | 'unknown';
  /** The agent runs in a mount namespace other than pid 1's (a container, `unshare -m`, `ip netns exec`). */
  ownMountNamespace: boolean;
  /** `major:minor` of the bpffs instance under `root`. */
  device: string;
  detail?: string;
}

/** The fix, for the log line and the status. */
export const PRIVATE_BPFFS_FIX =
  'run the agent in the node\'s mount namespace (`nsenter --net=/run/netns/NAME tendril-agent …` rather than `ip netns exec NAME …`, which mounts a private /sys), or mount the host\'s /sys/fs/bpf into its mount namespace';

/** Linux's dev_t split (new_decode_dev). */
function devName(dev: bigint): string {
  const major = ((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn);
  const minor = (dev & 0xffn) | ((dev >> 12n) & ~0xffn);
  return `${major}:${minor}`;
}

/** Devices of the bpf filesystems in a mountinfo text (field 3; the type follows the ` - ` separator). */
export function bpffsDevices(mountinfo: string): Set<string> {
  const out = new Set<string>();
  for (const line of mountinfo.split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const fstype = line.slice(sep + 3).split(' ')[0];
    if (fstype !== 'bpf') continue;
    const dev = line.split(' ')[2];
    if (dev) out.add(dev);
  }
  return out;
}

/** The mount ID of the topmost mount on `/` (a mount namespace's copy of a mount gets an ID of its own). */
export function rootMountId(mountinfo: string): string | undefined {
  let id: string | undefined;
  for (const line of mountinfo.split('\n')) {
    const f = line.split(' ');
    if (f[4] === '/') id = f[0];
  }
  return id;
}

async function ownMountNamespaceOf(proc: string, initMounts: string | undefined): Promise<boolean> {
  try {
    return (await readlink(`${proc}/self/ns/mnt`)) !== (await readlink(`${proc}/1/ns/mnt`));
  } catch {
    // pid 1's namespace links need ptrace rights a root Node process may lack (EACCES): the mounts say it too.
    if (initMounts === undefined) return false;
    return rootMountId(await readFile(`${proc}/self/mountinfo`, 'utf8')) !== rootMountId(initMounts);
  }
}

/** Where `root`'s bpffs comes from, as seen from /proc (`proc` for tests of the parsing only). */
export async function bpffsOrigin(root: string, proc = '/proc'): Promise<BpffsOrigin> {
  const device = devName((await stat(root, { bigint: true })).dev);
  let initMounts: string;
  try {
    initMounts = await readFile(`${proc}/1/mountinfo`, 'utf8');
  } catch (err) {
    const ownMountNamespace = await ownMountNamespaceOf(proc, undefined);
    return { root, sharing: 'unknown', ownMountNamespace, device, detail: `cannot read pid 1's mounts: ${(err as Error).message}` };
  }
  const ownMountNamespace = await ownMountNamespaceOf(proc, initMounts);
  const sharing = bpffsDevices(initMounts).has(device) ? 'node' : 'private';
  return { root, sharing, ownMountNamespace, device };
}
