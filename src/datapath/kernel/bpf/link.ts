import { KernelError, errnoNumber } from '../errors.js';
import { AttachType, LinkFlag, LinkType } from './constants.js';
import { type NativeHandle, bpfAsync, bpfSync, nativeBpf } from './native.js';
import { type BpfProgram } from './program.js';

export type Direction = 'ingress' | 'egress';

export interface TcxAttachOptions {
  /** The device is in this network namespace (path of its file); the caller's otherwise. */
  netns?: string;
  /** Place among the device's other tcx programs; 'last' (appended) unless given. */
  placement?: 'first' | 'last';
}

export interface TcxLinkInfo {
  id: number;
  /** ID of the program the link runs now. */
  progId: number;
  /** 0 once the link is detached (BPF_LINK_DETACH, or its device was deleted). */
  ifindex: number;
  direction: Direction | undefined;
}

function attachTypeOf(direction: Direction): number {
  return direction === 'ingress' ? AttachType.TCX_INGRESS : AttachType.TCX_EGRESS;
}

function directionOf(attachType: number | undefined): Direction | undefined {
  if (attachType === AttachType.TCX_INGRESS) return 'ingress';
  if (attachType === AttachType.TCX_EGRESS) return 'egress';
  return undefined;
}

/**
 * A tcx link (kernel 6.6+): a program on a device's ingress or egress hook,
 * held by the link's fd or by a pin of it. Replacing the program through the
 * link is atomic (no packet sees no program), which is how a restarted agent
 * swaps in a new build without a gap: open the pinned link, update it.
 */
export class TcxLink {
  readonly #handle: NativeHandle;

  private constructor(handle: NativeHandle) {
    this.#handle = handle;
  }

  /** BPF_LINK_CREATE with BPF_TCX_INGRESS/EGRESS (raw: Debian's libbpf lacks the helper). */
  static async attach(program: BpfProgram, ifindex: number, direction: Direction, opts: TcxAttachOptions = {}): Promise<TcxLink> {
    const flags = opts.placement === 'first' ? LinkFlag.BEFORE : 0;
    const handle = await bpfAsync(() => nativeBpf().tcxAttach(program.handle(), ifindex, attachTypeOf(direction), flags, opts.netns ?? null));
    return new TcxLink(handle);
  }

  /** Opens a pinned link; a pin that holds another kind of link is refused (EINVAL). */
  static openPinned(path: string): TcxLink {
    const bpf = nativeBpf();
    const handle = bpfSync(() => bpf.objGet(path, 'link'));
    const info = bpfSync(() => bpf.linkInfo(handle));
    if (info.type !== LinkType.TCX) {
      bpf.close(handle);
      throw new KernelError(errnoNumber('EINVAL'), `BPF_OBJ_GET ${path}`, `pinned link ${info.id} is of type ${info.type}, not tcx`);
    }
    return new TcxLink(handle);
  }

  info(): TcxLinkInfo {
    const i = bpfSync(() => nativeBpf().linkInfo(this.#handle));
    return { id: i.id, progId: i.progId, ifindex: i.ifindex ?? 0, direction: directionOf(i.attachType) };
  }

  /** Pins the link: it (and the attachment) then outlives this process. */
  pin(path: string): void {
    bpfSync(() => nativeBpf().objPin(this.#handle, path));
  }

  /**
   * Atomically replaces the link's program (BPF_LINK_UPDATE). With
   * `expected`, the kernel refuses (EPERM) when the link runs another
   * program, so a stale agent cannot undo a newer one's update.
   */
  update(program: BpfProgram, opts: { expected?: BpfProgram } = {}): void {
    bpfSync(() => nativeBpf().linkUpdate(this.#handle, program.handle(), opts.expected?.handle() ?? null));
  }

  /**
   * BPF_LINK_DETACH on libuv's pool (the kernel waits for an RCU grace
   * period): the program leaves the device, even while pins or fds hold the
   * link.
   */
  detach(): Promise<void> {
    return bpfAsync(() => nativeBpf().linkDetach(this.#handle));
  }

  /**
   * Closes this process's fd; an unpinned, undetached link detaches when its
   * last fd closes. The close itself runs on libuv's pool (that detach waits
   * for an RCU grace period too); only a link handle left to the garbage
   * collector is closed where the collector runs.
   */
  close(): void {
    nativeBpf().close(this.#handle);
  }
}
