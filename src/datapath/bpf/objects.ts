/**
 * The datapath's four ELF objects (build/bpf/bpf_lxc.o, bpf_host.o,
 * bpf_netdev.o and bpf_overlay.o), loaded once per agent start with their maps pinned under
 * `<bpffs root>/tendril/`. Later loads reuse the first one's pins, so every
 * object's programs share every map; an agent restart reuses them too
 * (entries, conntrack included, survive).
 */
import { createLogger, type Logger } from '../../logging/logger.js';
import { upgradePinnedMaps } from './pinnedMapUpgrade.js';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BpfObject, type BpfProgram } from '../kernel/bpf/index.js';
import { DatapathError } from '../types.js';
import { DefaultMapSize, type MapNameValue } from './constants.js';

/** build/bpf of this package (objects.js lives in dist/src/datapath/bpf/). */
export const DEFAULT_OBJECT_DIR = fileURLToPath(new URL('../../../../build/bpf/', import.meta.url));

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
 * Loads every object into one pin directory. A pinned map whose size differs
 * from the configured one (a --bpf-*-max flag changed across a restart) is
 * refused by libbpf: the error says so, since its entries are live state.
 */
export async function loadDatapathObjects(opts: LoadDatapathOptions): Promise<DatapathObjects> {
  const dir = opts.objectDir ?? DEFAULT_OBJECT_DIR;
  const maxEntries = effectiveSizes(opts.mapSizes);
  if (existsSync(opts.pinDir)) await upgradePinnedMaps(opts.pinDir, maxEntries, opts.log ?? createLogger('datapath'));
  const load = async (file: string): Promise<BpfObject> => {
    const path = join(dir, file);
    if (!existsSync(path)) throw new DatapathError('failed', `eBPF object ${path} is missing: build it with make build, or run the agent with --datapath routing`);
    try {
      return await BpfObject.load(path, { pinRoot: opts.pinDir, maxEntries });
    } catch (err) {
      throw new DatapathError('failed', `loading ${path} with maps pinned in ${opts.pinDir} failed (a pinned map of another size stays until removed: rm ${opts.pinDir}/<map> or keep the old --bpf-*-max): ${(err as Error).message}`, [], '', { cause: err });
    }
  };
  const loaded: BpfObject[] = [];
  const closeAll = () => {
    for (const o of loaded) o.close();
  };
  try {
    for (const file of [LXC_OBJECT_FILE, HOST_OBJECT_FILE, NETDEV_OBJECT_FILE, OVERLAY_OBJECT_FILE]) loaded.push(await load(file));
  } catch (err) {
    closeAll();
    throw err;
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
      close: closeAll,
    };
  } catch (err) {
    closeAll();
    throw new DatapathError('failed', (err as Error).message, [], '', { cause: err });
  }
}
