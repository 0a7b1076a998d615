/**
 * The datapath's programs on devices: tcx links pinned under
 * `<pin dir>/links/<ifname>-<direction>`, so they outlive the agent and a
 * restarted agent's attach replaces the program through the pinned link
 * atomically (no packet sees no program). Kernels without tcx get clsact
 * filters (the kernel layer decides); those need no pins.
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { isKernelError } from '../kernel/errors.js';
import { attach, type BpfProgram, type Direction, mkdirPinDir, TcxLink, unpin } from '../kernel/bpf/index.js';
import type { Netlink } from '../kernel/netlink/index.js';
import { DatapathError } from '../types.js';

export interface ProgramPair {
  ingress: BpfProgram;
  egress: BpfProgram;
}

/** Programs for some of a device's hooks (lo has only an egress one). */
export type ProgramSet = Partial<ProgramPair>;

/**
 * How programs go on pods' devices. `tcx`: pinned tcx links where the kernel
 * has tcx (clsact otherwise); each tcx attach waits out an RCU grace period
 * under the rtnl lock (13 ms here, the two of a pod 27 ms, serialized).
 * `clsact`: cls_bpf filters (2 ms for both), replaced atomically in place by a
 * restarted agent and kept by the kernel while the agent is down, as links are.
 */
export type AttachPolicy = 'tcx' | 'clsact';

export class ProgramLinks {
  /** Devices this process attached to (name → ifindex): a later sync needs no attach. */
  readonly #attached = new Map<string, number>();

  private constructor(
    readonly dir: string,
    private readonly netlink: () => Promise<Netlink>,
  ) {}

  static async open(pinDir: string, netlink: () => Promise<Netlink>): Promise<ProgramLinks> {
    const dir = join(pinDir, 'links');
    await mkdirPinDir(dir);
    return new ProgramLinks(dir, netlink);
  }

  pinPath(ifName: string, direction: Direction): string {
    return join(this.dir, `${ifName}-${direction}`);
  }

  /** Whether this process already attached the pair to this device. */
  isAttached(ifName: string, ifindex: number): boolean {
    return this.#attached.get(ifName) === ifindex;
  }

  /**
   * Whether the kernel has a program of ours on the hook now (`tendril
   * status`): a pinned tcx link still on this device, or our cls_bpf filter
   * (priority 1, handle 1). Asks the kernel, not this process's memory, so a
   * filter someone deleted or a device that was recreated shows as missing.
   */
  async inKernel(ifName: string, ifindex: number, direction: Direction): Promise<boolean> {
    try {
      const link = TcxLink.openPinned(this.pinPath(ifName, direction));
      try {
        if (link.info().ifindex === ifindex) return true;
      } finally {
        link.close();
      }
    } catch (err) {
      if (!isKernelError(err, 'ENOENT')) throw err;
    }
    const nl = await this.netlink();
    try {
      return (await nl.listBpfFilters(ifName, direction)).some((f) => f.priority === 1 && f.handle === 1);
    } catch (err) {
      // No clsact qdisc, or the device went: nothing of ours is there.
      if (isKernelError(err, 'EINVAL', 'ENOENT', 'ENODEV', 'ESRCH')) return false;
      throw err;
    }
  }

  /**
   * Attaches the programs given (both in parallel), replacing what a pinned
   * link of the same device and hook ran before. A failure removes what this
   * call attached anew.
   */
  async attach(ifName: string, ifindex: number, programs: ProgramSet, policy: AttachPolicy = 'tcx'): Promise<void> {
    const one = (direction: Direction, program: BpfProgram) =>
      policy === 'clsact' ? attach({ ifindex, direction, program, mode: 'clsact' }) : attach({ ifindex, direction, program, pinPath: this.pinPath(ifName, direction) });
    const hooks = (['ingress', 'egress'] as const).flatMap((d) => (programs[d] ? [one(d, programs[d])] : []));
    const results = await Promise.allSettled(hooks);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      for (const r of results) {
        if (r.status !== 'fulfilled') continue;
        if (r.value.replacedExisting) r.value.close();
        else await r.value.detach().catch(() => undefined);
      }
      this.#attached.delete(ifName);
      const notFound = isKernelError(failed.reason, 'ENODEV', 'ENXIO');
      throw new DatapathError(notFound ? 'not-found' : 'failed', `attaching the datapath programs to ${ifName} (ifindex ${ifindex}) failed: ${(failed.reason as Error).message}`, [], '', { cause: failed.reason });
    }
    for (const r of results) if (r.status === 'fulfilled') r.value.close();
    this.#attached.set(ifName, ifindex);
  }

  /**
   * Takes the programs off a device that stays (an adopted pod's) and
   * removes the pins; for a deleted device only the pins are left to go.
   */
  async detach(ifName: string): Promise<void> {
    this.#attached.delete(ifName);
    await this.#deleteFilters(ifName);
    for (const direction of ['ingress', 'egress'] as const) {
      const path = this.pinPath(ifName, direction);
      let link: TcxLink;
      try {
        link = TcxLink.openPinned(path);
      } catch (err) {
        if (isKernelError(err, 'ENOENT')) continue;
        throw err;
      }
      try {
        if (link.info().ifindex !== 0) await link.detach();
      } finally {
        link.close();
      }
      this.#unpin(path);
    }
  }

  /** Our cls_bpf filters (priority 1, handle 1) on a device that stays; absent ones are fine. */
  async #deleteFilters(ifName: string): Promise<void> {
    const nl = await this.netlink();
    for (const direction of ['ingress', 'egress'] as const) {
      try {
        const ours = (await nl.listBpfFilters(ifName, direction)).some((f) => f.priority === 1 && f.handle === 1);
        if (ours) await nl.deleteBpfFilter({ link: ifName, direction, priority: 1, handle: 1 });
      } catch (err) {
        // No clsact qdisc (tcx was used), or the device went: nothing to take off.
        if (!isKernelError(err, 'EINVAL', 'ENOENT', 'ENODEV', 'ESRCH')) throw err;
      }
    }
  }

  /** Removes pins only (the device went and its links with it). */
  forget(ifName: string): void {
    this.#attached.delete(ifName);
    for (const direction of ['ingress', 'egress'] as const) this.#unpin(this.pinPath(ifName, direction));
  }

  #unpin(path: string): void {
    try {
      unpin(path);
    } catch (err) {
      if (!isKernelError(err, 'ENOENT')) throw err;
    }
  }

  /** Pins whose link no longer runs on a device (its device was deleted while the agent was down). */
  async pruneDetached(): Promise<string[]> {
    const removed: string[] = [];
    for (const name of await readdir(this.dir)) {
      const path = join(this.dir, name);
      let link: TcxLink;
      try {
        link = TcxLink.openPinned(path);
      } catch {
        continue;
      }
      try {
        if (link.info().ifindex === 0) {
          this.#unpin(path);
          removed.push(name);
        }
      } finally {
        link.close();
      }
    }
    return removed;
  }
}
