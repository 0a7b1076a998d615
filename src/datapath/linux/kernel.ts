import { KernelError, isKernelError } from '../kernel/errors.js';
import { Netlink } from '../kernel/netlink/index.js';
import { DatapathError, type DatapathErrorKind } from '../types.js';

/**
 * The Linux datapath's bridge to the kernel layer: netlink handles and the
 * mapping of KernelError (errno) onto DatapathError's kinds, which the agent
 * branches on.
 */

// Errnos that mean "the object is not there": no device, no address, no route.
const NOT_FOUND = new Set(['ENODEV', 'ENOENT', 'ESRCH', 'EADDRNOTAVAIL', 'ENXIO']);

function kindOf(err: KernelError): DatapathErrorKind {
  if (NOT_FOUND.has(err.code)) return 'not-found';
  if (err.code === 'EEXIST') return 'exists';
  return 'failed';
}

/** A KernelError as a DatapathError of the matching kind; anything else unchanged. */
export function toDatapathError(err: unknown): unknown {
  if (!(err instanceof KernelError)) return err;
  return new DatapathError(kindOf(err), err.message, [], err.kernelMessage ?? '', { cause: err });
}

/** Runs kernel calls, rethrowing their KernelErrors as DatapathErrors. */
export async function kernel<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw toDatapathError(err);
  }
}

/**
 * Opens a netlink handle in a pod's namespace. A missing namespace file is
 * `netns-gone`; a file that is not a network namespace (setns refuses it)
 * is `failed` and names the path.
 */
export async function openPodNetlink(netns: string): Promise<Netlink> {
  try {
    return await Netlink.open({ netns });
  } catch (err) {
    if (isKernelError(err, 'ENOENT', 'ENOTDIR')) throw new DatapathError('netns-gone', `network namespace ${netns} does not exist`);
    if (isKernelError(err, 'EINVAL')) throw new DatapathError('failed', `${netns} is not a network namespace`);
    throw toDatapathError(err);
  }
}

/**
 * A handle in the pod's namespace, or undefined when there is none to work
 * in: the path is gone (runtimes send DEL after removing it) or names
 * something that is not a network namespace.
 */
export async function openPodNetlinkIfPresent(netns: string): Promise<Netlink | undefined> {
  try {
    return await Netlink.open({ netns });
  } catch (err) {
    if (isKernelError(err, 'ENOENT', 'ENOTDIR', 'EINVAL')) return undefined;
    throw toDatapathError(err);
  }
}

/**
 * Handles in the agent's own namespace, opened on first use and kept: the
 * host side of every pod goes through them. Requests on one socket run one
 * at a time, and some take the kernel long (deleting a veth waits ~20 ms for
 * RCU grace periods), so a few sockets let concurrent ADDs and DELs overlap
 * in the kernel instead of queueing behind each other.
 */
export class HostNetlink {
  private readonly handles: Array<Promise<Netlink> | undefined>;
  private next = 0;

  constructor(size = 4) {
    this.handles = new Array<Promise<Netlink> | undefined>(size).fill(undefined);
  }

  /** One of the handles, in turn. */
  get(): Promise<Netlink> {
    const i = this.next;
    this.next = (this.next + 1) % this.handles.length;
    let handle = this.handles[i];
    if (!handle) {
      const opening = Netlink.open();
      handle = opening;
      this.handles[i] = opening;
      // A failed open is not cached: the next call tries again.
      opening.catch(() => {
        if (this.handles[i] === opening) this.handles[i] = undefined;
      });
    }
    return handle;
  }

  async close(): Promise<void> {
    const open = this.handles.splice(0, this.handles.length, ...new Array<undefined>(this.handles.length).fill(undefined));
    // A handle that never opened has nothing to close.
    const handles = await Promise.all(open.map((h) => h?.catch(() => undefined)));
    await Promise.all(handles.map((nl) => nl?.close()));
  }
}

/** Deletes a link; false when it was not there (teardown is idempotent). */
export async function deleteLinkIfPresent(nl: Netlink, name: string | number): Promise<boolean> {
  try {
    await nl.deleteLink(name);
    return true;
  } catch (err) {
    if (isKernelError(err, 'ENODEV')) return false;
    throw err;
  }
}
