/**
 * The moment of an upgrade whose maps changed layout: every hook where a
 * program of the old build runs gets the new build's program of the same
 * name, each in one atomic step (a pinned tcx link's update, a cls_bpf
 * filter's in-place replace): a packet sees the old program on the old maps
 * or the new one on the new maps, never none. All hooks are swapped in one
 * pass right after the new maps are filled, so the time both builds run
 * side by side is the pass itself (a few ms per device), not the agent's
 * whole restore (which attaches through the same links and filters later and
 * finds the new programs already there).
 */
import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../../logging/logger.js';
import { attach, type BpfProgram, MAX_OBJ_NAME, TcxLink } from '../kernel/bpf/index.js';
import { isKernelError } from '../kernel/errors.js';
import { Netlink } from '../kernel/netlink/index.js';
import { DatapathError } from '../types.js';

export interface SwappedHooks {
  tcx: number;
  clsact: number;
}

/** The kernel keeps 15 bytes of a program's name (bpftool shows the whole name from BTF): the key both builds' programs share. */
const kernelName = (name: string) => name.slice(0, MAX_OBJ_NAME);

/**
 * Swaps the programs on every pinned tcx link under `<pinDir>/links` and on
 * every cls_bpf filter of ours in this network namespace. "Ours" is a
 * program that uses a map of this pin directory (`oldMapIds`): another
 * datapath's programs of the same names (another pin directory) stay.
 */
export async function swapPrograms(pinDir: string, programs: readonly BpfProgram[], oldMapIds: ReadonlySet<number>, log: Logger): Promise<SwappedHooks> {
  const byName = new Map(programs.map((p) => [kernelName(p.name), p]));
  const swapped: SwappedHooks = { tcx: 0, clsact: 0 };
  const linksDir = join(pinDir, 'links');
  let pins: string[] = [];
  try {
    pins = readdirSync(linksDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  for (const pin of pins) {
    const link = TcxLink.openPinned(join(linksDir, pin));
    try {
      const info = link.info();
      if (info.ifindex === 0) continue; // its device is gone; the agent prunes the pin
      const old = programOfId(info.progId);
      if (!old.mapIds.some((id) => oldMapIds.has(id))) continue;
      const next = byName.get(kernelName(old.name));
      if (!next) throw new DatapathError('failed', `the tcx link ${pin} runs program ${old.name}, which the new objects do not have`);
      link.update(next);
      swapped.tcx++;
    } finally {
      link.close();
    }
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
        if (!filter?.programId) continue;
        const old = programOfId(filter.programId);
        if (!old.mapIds.some((id) => oldMapIds.has(id))) continue;
        const next = byName.get(kernelName(old.name));
        if (!next) throw new DatapathError('failed', `the filter on ${dev.name} ${direction} runs program ${old.name}, which the new objects do not have`);
        const a = await attach({ ifindex: dev.index, direction, program: next, mode: 'clsact' });
        a.close();
        swapped.clsact++;
      }
    }
  } finally {
    await nl.close();
  }
  log.info({ ...swapped }, 'swapped the programs on every hook to the new build');
  return swapped;
}

/** A loaded program's kernel name and maps by its ID (bpftool: the addon opens programs by fd only). */
function programOfId(id: number): { name: string; mapIds: number[] } {
  const r = spawnSync('bpftool', ['-j', 'prog', 'show', 'id', String(id)], { encoding: 'utf8' });
  if (r.error || r.status !== 0) throw new DatapathError('failed', `bpftool prog show id ${id} failed: ${r.error?.message ?? r.stderr.trim()}`);
  const p = JSON.parse(r.stdout) as { name?: string; map_ids?: number[] };
  return { name: p.name ?? '', mapIds: p.map_ids ?? [] };
}
