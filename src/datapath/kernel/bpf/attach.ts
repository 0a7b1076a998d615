import { isKernelError } from '../errors.js';
import { Netlink } from '../netlink/index.js';
import { unpin } from './bpffs.js';
import { MAX_OBJ_NAME, ProgType } from './constants.js';
import { type Direction, TcxLink } from './link.js';
import { type BpfProgram } from './program.js';

export type AttachMode = 'tcx' | 'clsact';

export interface AttachRequest {
  /** The device, in `netns` when given, else in the agent's namespace. */
  ifindex: number;
  direction: Direction;
  /** A loaded sched_cls program. */
  program: BpfProgram;
  /** Path of the device's network namespace file. */
  netns?: string;
  /**
   * tcx only: pin the link here. When a link to the same device and hook is
   * already pinned there (an earlier agent's), its program is replaced
   * atomically instead of attaching a second one.
   */
  pinPath?: string;
  /** 'auto' (default) uses tcx when the kernel has it; 'clsact' forces the fallback. */
  mode?: 'auto' | AttachMode;
  /** clsact only: the filter's priority (and handle is 1); 1 unless given. */
  priority?: number;
}

/** A program on a device hook, whichever way it got there. */
export interface Attachment {
  readonly mode: AttachMode;
  readonly ifindex: number;
  readonly direction: Direction;
  /** True when attach() updated an attachment that already existed (a pinned tcx link, or a filter of the same priority). */
  readonly replacedExisting: boolean;
  /** Swaps the program atomically: packets see the old one or the new one, never none. */
  replace(program: BpfProgram): Promise<void>;
  /** Takes the program off the device (and removes the link's pin). */
  detach(): Promise<void>;
  /** Lets go of this process's handles; a pinned link or a tc filter stays attached. */
  close(): void;
}

let tcxAvailable: boolean | undefined;

/** Whether the kernel has tcx, once an attach has found out (undefined before). */
export function tcxSupport(): boolean | undefined {
  return tcxAvailable;
}

function isNoTcx(err: unknown): boolean {
  // Kernels before 6.6 do not know attach types 46/47: EINVAL from link_create.
  return isKernelError(err, 'EINVAL', 'EOPNOTSUPP', 'ENOTSUP');
}

/**
 * Attaches a sched_cls program to a device's ingress or egress. Uses a tcx
 * link when the kernel has tcx (found out by the first attempt, remembered
 * for the process), else a direct-action cls_bpf filter on a clsact qdisc.
 */
export async function attach(req: AttachRequest): Promise<Attachment> {
  if (req.program.type !== ProgType.SCHED_CLS) {
    throw new TypeError(`program ${req.program.name} is of type ${req.program.type}, not sched_cls: it cannot go on a tc hook`);
  }
  const mode = req.mode ?? 'auto';
  if (mode === 'tcx' || (mode === 'auto' && tcxAvailable !== false)) {
    try {
      const a = await TcxAttachment.attach(req);
      tcxAvailable = true;
      return a;
    } catch (err) {
      if (mode === 'tcx' || tcxAvailable === true || !isNoTcx(err)) throw err;
      tcxAvailable = false;
    }
  }
  return ClsactAttachment.attach(req);
}

class TcxAttachment implements Attachment {
  readonly mode = 'tcx';

  private constructor(
    private link: TcxLink | undefined,
    readonly ifindex: number,
    readonly direction: Direction,
    private readonly pinPath: string | undefined,
    readonly replacedExisting: boolean,
  ) {}

  static async attach(req: AttachRequest): Promise<TcxAttachment> {
    if (req.pinPath !== undefined) {
      const existing = openPinnedLink(req.pinPath);
      if (existing) {
        const info = existing.info();
        if (info.ifindex === req.ifindex && info.direction === req.direction) {
          try {
            existing.update(req.program);
          } catch (err) {
            existing.close();
            throw err;
          }
          return new TcxAttachment(existing, req.ifindex, req.direction, req.pinPath, true);
        }
        // A link for another device (or whose device is gone): not ours to keep.
        existing.close();
        unpin(req.pinPath);
      }
    }
    const link = await TcxLink.attach(req.program, req.ifindex, req.direction, req.netns !== undefined ? { netns: req.netns } : {});
    if (req.pinPath !== undefined) {
      try {
        link.pin(req.pinPath);
      } catch (err) {
        link.close(); // unpinned: closing detaches it
        throw err;
      }
    }
    return new TcxAttachment(link, req.ifindex, req.direction, req.pinPath, false);
  }

  private current(): TcxLink {
    if (!this.link) throw new Error(`tcx attachment on ifindex ${this.ifindex} ${this.direction} was detached or closed`);
    return this.link;
  }

  async replace(program: BpfProgram): Promise<void> {
    this.current().update(program);
  }

  async detach(): Promise<void> {
    const link = this.current();
    this.link = undefined;
    try {
      await link.detach();
    } finally {
      link.close();
    }
    if (this.pinPath !== undefined) {
      try {
        unpin(this.pinPath);
      } catch (err) {
        if (!isKernelError(err, 'ENOENT')) throw err;
      }
    }
  }

  close(): void {
    this.link?.close();
    this.link = undefined;
  }
}

function openPinnedLink(path: string): TcxLink | undefined {
  try {
    return TcxLink.openPinned(path);
  } catch (err) {
    if (isKernelError(err, 'ENOENT')) return undefined;
    throw err;
  }
}

class ClsactAttachment implements Attachment {
  readonly mode = 'clsact';
  private attached = true;

  private constructor(
    readonly ifindex: number,
    readonly direction: Direction,
    private readonly netns: string | undefined,
    private readonly priority: number,
    readonly replacedExisting: boolean,
  ) {}

  static async attach(req: AttachRequest): Promise<ClsactAttachment> {
    const priority = req.priority ?? 1;
    const replaced = await withNetlink(req.netns, async (nl) => {
      try {
        await nl.addClsact(req.ifindex);
      } catch (err) {
        if (!isKernelError(err, 'EEXIST')) throw err;
      }
      const before = await nl.listBpfFilters(req.ifindex, req.direction);
      await setFilter(nl, req.ifindex, req.direction, priority, req.program);
      return before.some((f) => f.priority === priority && f.handle === 1);
    });
    return new ClsactAttachment(req.ifindex, req.direction, req.netns, priority, replaced);
  }

  async replace(program: BpfProgram): Promise<void> {
    if (!this.attached) throw new Error(`clsact attachment on ifindex ${this.ifindex} ${this.direction} was detached`);
    await withNetlink(this.netns, (nl) => setFilter(nl, this.ifindex, this.direction, this.priority, program));
  }

  async detach(): Promise<void> {
    if (!this.attached) return;
    this.attached = false;
    await withNetlink(this.netns, (nl) => nl.deleteBpfFilter({ link: this.ifindex, direction: this.direction, priority: this.priority, handle: 1 }));
  }

  close(): void {
    // The filter holds its own reference to the program; nothing to release here.
  }
}

/** Adds or replaces (atomically, in the kernel) the filter at `priority`, handle 1. */
function setFilter(nl: Netlink, ifindex: number, direction: Direction, priority: number, program: BpfProgram): Promise<void> {
  return nl.addBpfFilter({
    link: ifindex,
    direction,
    fd: program.fd,
    name: program.name.slice(0, MAX_OBJ_NAME),
    priority,
    handle: 1,
    directAction: true,
    replace: true,
  });
}

async function withNetlink<T>(netns: string | undefined, fn: (nl: Netlink) => Promise<T>): Promise<T> {
  const nl = await Netlink.open(netns !== undefined ? { netns } : {});
  try {
    return await fn(nl);
  } finally {
    await nl.close();
  }
}
