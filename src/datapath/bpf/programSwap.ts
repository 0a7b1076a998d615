/**
 * The moment of an upgrade whose maps changed layout: every hook where a
 * program of the old build runs gets the new build's program of the same
 * name, each in one atomic step (a pinned tcx link's update, a cls_bpf
 * filter's in-place replace): a packet sees the old program on the old maps
 * or the new one on the new maps, never none. The hooks are found first
 * (`findHooks`, which asks bpftool and netlink: tens of ms), so that the swap
 * itself (`swap`) is one system call per hook in a row and the time both
 * builds run side by side is a few ms, not the agent's whole restore (which
 * attaches through the same links and filters later and finds the new
 * programs already there).
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../../logging/logger.js';
import { attach, type BpfProgram, type Direction, MAX_OBJ_NAME, TcxLink } from '../kernel/bpf/index.js';
import { isKernelError } from '../kernel/errors.js';
import { Netlink } from '../kernel/netlink/index.js';
import { DatapathError } from '../types.js';
import { BPFTOOL_TIMEOUT_MS } from './btf.js';

/** The kernel keeps 15 bytes of a program's name (bpftool shows the whole name from BTF): the key both builds' programs share. */
const kernelName = (name: string) => name.slice(0, MAX_OBJ_NAME);

type Hook = { kind: 'tcx'; pin: string; link: TcxLink; next: BpfProgram } | { kind: 'clsact'; device: string; ifindex: number; direction: Direction; next: BpfProgram };

/** The hooks running the old build's programs, each with the new program to put there. */
export class ProgramSwap {
  #done = false;

  private constructor(
    private readonly hooks: Hook[],
    private readonly log: Logger,
  ) {}

  /**
   * Every pinned tcx link under `<pinDir>/links` and every cls_bpf filter in
   * this network namespace whose program is ours: one that uses a map of
   * this pin directory (`oldMapIds`). Another datapath's programs of the same
   * names (another pin directory) are not touched.
   */
  static async findHooks(pinDir: string, programs: readonly BpfProgram[], oldMapIds: ReadonlySet<number>, log: Logger): Promise<ProgramSwap> {
    const byName = new Map(programs.map((p) => [kernelName(p.name), p]));
    const nextFor = (progId: number, where: string): BpfProgram | undefined => {
      const old = programOfId(progId);
      if (!old.mapIds.some((id) => oldMapIds.has(id))) return undefined;
      const next = byName.get(kernelName(old.name));
      if (!next) throw new DatapathError('failed', `${where} runs program ${old.name}, which the new objects do not have`);
      return next;
    };
    const hooks: Hook[] = [];
    const swap = new ProgramSwap(hooks, log);
    try {
      const linksDir = join(pinDir, 'links');
      let pins: string[] = [];
      try {
        pins = readdirSync(linksDir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
      for (const pin of pins) {
        const link = TcxLink.openPinned(join(linksDir, pin));
        const info = link.info();
        // A link whose device is gone is the agent's to prune.
        const next = info.ifindex === 0 ? undefined : nextFor(info.progId, `the tcx link ${pin}`);
        if (next) hooks.push({ kind: 'tcx', pin, link, next });
        else link.close();
      }
      const nl = await Netlink.open();
      try {
        for (const dev of await nl.listLinks()) {
          for (const direction of ['ingress', 'egress'] as const) {
            let filters;
            try {
              filters = await nl.listBpfFilters(dev.index, direction);
            } catch (err) {
              // No clsact qdisc, or the device went meanwhile: nothing of ours there.
              if (isKernelError(err, 'EINVAL', 'ENOENT', 'ENODEV', 'ESRCH')) continue;
              throw err;
            }
            const filter = filters.find((f) => f.priority === 1 && f.handle === 1);
            const next = filter?.programId === undefined ? undefined : nextFor(filter.programId, `the filter on ${dev.name} ${direction}`);
            if (next) hooks.push({ kind: 'clsact', device: dev.name, ifindex: dev.index, direction, next });
          }
        }
      } finally {
        await nl.close();
      }
    } catch (err) {
      swap.close();
      throw err;
    }
    return swap;
  }

  get size(): number {
    return this.hooks.length;
  }

  /**
   * Puts the new programs on every hook, one after the other; returns how
   * long it took (ms). The hooks of the programs named in `first` (the
   * pods' programs, from the loader) go first: while the node's devices
   * still run the old programs, a flow arriving from outside is opened (and
   * translated) by the old programs, whose entry the pass after the swap
   * writes over the partial one the new pod-side programs made (see
   * MapMigrationPlan.reverseKey); the other order would leave a flow opened
   * by the new node-side programs to an old pod-side program that knows
   * nothing of it, and carry that program's partial entry over.
   */
  async swap(first: ReadonlySet<string> = new Set()): Promise<number> {
    const started = performance.now();
    const early = (h: Hook) => first.has(h.next.name);
    for (const h of [...this.hooks.filter(early), ...this.hooks.filter((x) => !early(x))]) {
      if (h.kind === 'tcx') {
        h.link.update(h.next);
        continue;
      }
      // A device that went meanwhile took its filter with it.
      try {
        (await attach({ ifindex: h.ifindex, direction: h.direction, program: h.next, mode: 'clsact' })).close();
      } catch (err) {
        if (!isKernelError(err, 'ENODEV', 'ENOENT')) throw err;
      }
    }
    this.#done = true;
    const ms = performance.now() - started;
    this.log.info({ tcx: this.hooks.filter((h) => h.kind === 'tcx').length, clsact: this.hooks.filter((h) => h.kind === 'clsact').length, ms: Math.round(ms * 10) / 10 }, 'swapped the programs on every hook to the new build');
    return ms;
  }

  /** Whether swap() ran: from then on the new maps are the ones in use. */
  get swapped(): boolean {
    return this.#done;
  }

  close(): void {
    for (const h of this.hooks) if (h.kind === 'tcx') h.link.close();
  }
}

/** A loaded program's name and maps by its ID (bpftool: the addon opens programs by fd only). */
function programOfId(id: number): { name: string; mapIds: number[] } {
  const r = spawnSync('bpftool', ['-j', 'prog', 'show', 'id', String(id)], { encoding: 'utf8', timeout: BPFTOOL_TIMEOUT_MS });
  if (r.error || r.status !== 0) throw new DatapathError('failed', `bpftool prog show id ${id} failed: ${r.error?.message ?? r.stderr.trim()}`);
  const p = JSON.parse(r.stdout) as { name?: string; map_ids?: number[] };
  return { name: p.name ?? '', mapIds: p.map_ids ?? [] };
}
