/**
 * The datapath's four ELF objects (build/bpf/bpf_lxc.o, bpf_host.o,
 * bpf_netdev.o and bpf_overlay.o), loaded once per agent start with their maps pinned under
 * `<bpffs root>/tendril/`. Later loads reuse the first one's pins, so every
 * object's programs share every map; an agent restart reuses them too
 * (entries, conntrack included, survive).
 */
import { createLogger, type Logger } from '../../logging/logger.js';
import { upgradePinnedMaps } from './pinnedMapUpgrade.js';
import { declaredPinnedMaps, MapMigration, type MigratedMap, planMapMigration } from './mapMigration.js';
import { ProgramSwap } from './programSwap.js';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { installPath } from '../../installLayout.js';
import { BpfMap, BpfObject, type BpfProgram, codec, type RawMap } from '../kernel/bpf/index.js';
import { DatapathError } from '../types.js';
import { DefaultMapSize, MapName, type MapNameValue } from './constants.js';
import { datapathConfig } from './layout.js';

/** build/bpf of the installation. */
export const DEFAULT_OBJECT_DIR = installPath('build', 'bpf');

export const LXC_OBJECT_FILE = 'bpf_lxc.o';
export const HOST_OBJECT_FILE = 'bpf_host.o';
export const NETDEV_OBJECT_FILE = 'bpf_netdev.o';
export const OVERLAY_OBJECT_FILE = 'bpf_overlay.o';

export const ProgramName = {
  FROM_CONTAINER: 'tendril_from_container',
  TO_CONTAINER: 'tendril_to_container',
  FROM_HOST: 'tendril_from_host',
  TO_HOST: 'tendril_to_host',
  FROM_NETDEV: 'tendril_from_netdev',
  TO_NETDEV: 'tendril_to_netdev',
  TO_LO: 'tendril_to_lo',
  FROM_OVERLAY: 'tendril_from_overlay',
} as const;

/** Map sizes by map name; missing ones take DefaultMapSize. */
export type MapSizes = Partial<Record<MapNameValue, number>>;

export interface DatapathObjects {
  readonly lxc: BpfObject;
  readonly host: BpfObject;
  readonly netdev: BpfObject;
  readonly overlay: BpfObject;
  readonly fromContainer: BpfProgram;
  readonly toContainer: BpfProgram;
  readonly fromHost: BpfProgram;
  readonly toHost: BpfProgram;
  /** Ingress, egress of each --devices device; lo's egress. */
  readonly fromNetdev: BpfProgram;
  readonly toNetdev: BpfProgram;
  readonly toLo: BpfProgram;
  /** tendril_vxlan's ingress (--routing-mode tunnel). */
  readonly fromOverlay: BpfProgram;
  /** The pinned maps this load carried over from another layout or size (empty when none differed). */
  readonly migrated: readonly MigratedMap[];
  close(): void;
}

export interface LoadDatapathOptions {
  /** `<bpffs root>/tendril`. */
  pinDir: string;
  mapSizes?: MapSizes;
  /** Where the objects are (default: the package's build/bpf). */
  objectDir?: string;
  /** Says which pinned maps of an older release were carried over to their new type (default: a logger of its own). */
  log?: Logger;
}

function effectiveSizes(sizes: MapSizes = {}): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, n] of Object.entries(DefaultMapSize)) out[name] = sizes[name as MapNameValue] ?? n;
  return out;
}

/**
 * Loads every object into one pin directory. A pinned map whose layout,
 * type, size or max entries differ from the objects' (an older or newer
 * build's, or a --bpf-*-max flag changed across a restart) is converted to
 * the new definition with its entries (mapMigration.ts): the objects load on
 * a staging pin directory beside the old pins, the entries are carried over
 * while the old programs run, the programs on every hook are swapped, and
 * the new maps take the real pin names.
 */
export async function loadDatapathObjects(opts: LoadDatapathOptions): Promise<DatapathObjects> {
  const dir = opts.objectDir ?? DEFAULT_OBJECT_DIR;
  const maxEntries = effectiveSizes(opts.mapSizes);
  const log = opts.log ?? createLogger('datapath');
  const files = [LXC_OBJECT_FILE, HOST_OBJECT_FILE, NETDEV_OBJECT_FILE, OVERLAY_OBJECT_FILE].map((f) => join(dir, f));
  for (const path of files) if (!existsSync(path)) throw new DatapathError('failed', `eBPF object ${path} is missing: build it with make build, or run the agent with --datapath routing`);
  let migration: MapMigration | undefined;
  if (existsSync(opts.pinDir)) {
    await upgradePinnedMaps(opts.pinDir, maxEntries, log);
    const declared = declaredPinnedMaps(files);
    const plans = planMapMigration(opts.pinDir, declared, maxEntries);
    if (plans.length > 0) migration = MapMigration.stage(opts.pinDir, plans, declared, log);
  }
  const pinRoot = migration?.stagingDir ?? opts.pinDir;
  const load = async (path: string): Promise<BpfObject> => {
    try {
      return await BpfObject.load(path, { pinRoot, maxEntries });
    } catch (err) {
      throw new DatapathError('failed', `loading ${path} with maps pinned in ${pinRoot} failed: ${(err as Error).message}`, [], '', { cause: err });
    }
  };
  const loaded: BpfObject[] = [];
  const closeAll = () => {
    for (const o of loaded) o.close();
  };
  try {
    for (const path of files) loaded.push(await load(path));
  } catch (err) {
    closeAll();
    migration?.abort();
    throw err;
  }
  let migrated: MigratedMap[] = [];
  if (migration) {
    try {
      migrated = await adoptMaps(migration, loaded, opts.pinDir, log);
    } catch (err) {
      closeAll();
      throw err;
    }
  }
  const [lxc, host, netdev, overlay] = loaded as [BpfObject, BpfObject, BpfObject, BpfObject];
  try {
    return {
      lxc,
      host,
      netdev,
      overlay,
      fromContainer: lxc.program(ProgramName.FROM_CONTAINER),
      toContainer: lxc.program(ProgramName.TO_CONTAINER),
      fromHost: host.program(ProgramName.FROM_HOST),
      toHost: host.program(ProgramName.TO_HOST),
      fromNetdev: netdev.program(ProgramName.FROM_NETDEV),
      toNetdev: netdev.program(ProgramName.TO_NETDEV),
      toLo: netdev.program(ProgramName.TO_LO),
      fromOverlay: overlay.program(ProgramName.FROM_OVERLAY),
      migrated,
      close: closeAll,
    };
  } catch (err) {
    closeAll();
    throw new DatapathError('failed', (err as Error).message, [], '', { cause: err });
  }
}

/**
 * How long at most the new programs hold back TCP segments conntrack does
 * not know while the old maps' entries are carried over (see
 * ct_held_for_migration, bpf/lib/enforce.h). The window closes as soon as
 * the last pass is done; the deadline only bounds it for a loader that
 * dies half way.
 */
const MIGRATION_WINDOW_MAX_NS = 10_000_000_000n;

/** Opens (a deadline on CLOCK_MONOTONIC, as bpf_ktime_get_ns) or closes (0) the migration window in the new objects' tendril_config. */
function setMigrationWindow(objects: readonly BpfObject[], untilNs: bigint): void {
  const raw = objects.map((o) => o.maps.get(MapName.CONFIG)?.map).find((m) => m !== undefined);
  if (!raw) return;
  const config = new BpfMap(raw, codec.u32, datapathConfig);
  const current = config.get(0);
  if (current) config.set(0, { ...current, migrationUntilNs: untilNs });
}

/**
 * The objects are loaded on the staging pins: fill the new maps, swap the
 * programs on every hook, carry over what the old programs added meanwhile,
 * and move the new pins to the real names. A failure before the swap leaves
 * the old build running on its maps as it was; after a swap that failed part
 * way the new maps still take the pins (some hooks run the new programs on
 * them) and the error is thrown: the agent's attach puts the new programs
 * on the rest when it starts again.
 */
async function adoptMaps(migration: MapMigration, objects: readonly BpfObject[], pinDir: string, log: Logger): Promise<MigratedMap[]> {
  const newMaps = new Map<string, RawMap>();
  for (const p of migration.plans) {
    const m = objects.map((o) => o.maps.get(p.name)).find((x) => x !== undefined);
    if (m) newMaps.set(p.name, m.map);
  }
  let swap: ProgramSwap;
  try {
    swap = await ProgramSwap.findHooks(pinDir, objects.flatMap((o) => [...o.programs.values()]), migration.oldMapIds, log);
  } catch (err) {
    migration.abort();
    throw new DatapathError('failed', `finding the hooks of the old build failed (it runs on as it was): ${(err as Error).message}`, [], '', { cause: err });
  }
  try {
    try {
      await migration.copy(newMaps);
      await migration.catchUp(false);
      setMigrationWindow(objects, process.hrtime.bigint() + MIGRATION_WINDOW_MAX_NS);
    } catch (err) {
      migration.abort();
      throw new DatapathError('failed', `carrying the pinned maps over to the new layout failed before the programs were swapped (the old build runs on as it was): ${(err as Error).message}`, [], '', { cause: err });
    }
    let swapError: unknown;
    try {
      // The pods' hooks first (see ProgramSwap.swap).
      await swap.swap(new Set<string>([ProgramName.FROM_CONTAINER, ProgramName.TO_CONTAINER])).catch((err: unknown) => (swapError = err));
      await migration.catchUp(true);
    } finally {
      setMigrationWindow(objects, 0n);
    }
    const done = migration.finish();
    if (swapError !== undefined) throw new DatapathError('failed', `swapping the programs to the new build failed part way: ${(swapError as Error).message}`, [], '', { cause: swapError });
    return done;
  } finally {
    swap.close();
  }
}
