/**
 * The datapath's maps created and pinned by a test, in a directory of its own
 * on bpffs (`/sys/fs/bpf/tdl-<random>/tendril`), shaped as bpf/lib/*.h
 * declares them (smaller), so code that works from the pins (inspect, GC,
 * monitor) is tested against real maps without loading the programs.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { BPFFS_ROOT, BpfMap, codec, ensureBpffs, MapFlag, mkdirPinDir, perCpuValue, RawMap, removePinDir } from '../../kernel/bpf/index.js';
import { MapName } from '../constants.js';
import { ct4Key, ctEntry, datapathConfig, endpointInfo, endpointKey, ipcacheKey, ipcacheValue, metricsKey, metricsValue, policyEntry, policyKey } from '../layout.js';

export interface TestDatapathMaps {
  /** `<root>/tendril`: what DatapathInspector takes. */
  pinDir: string;
  /** The bpffs root to give the agent (`bpffsRoot`). */
  bpffsRoot: string;
  endpoints: BpfMap<ReturnType<typeof endpointKey.read>, ReturnType<typeof endpointInfo.read>>;
  ipcache: BpfMap<ReturnType<typeof ipcacheKey.read>, ReturnType<typeof ipcacheValue.read>>;
  policy: BpfMap<ReturnType<typeof policyKey.read>, ReturnType<typeof policyEntry.read>>;
  ctTcp: BpfMap<ReturnType<typeof ct4Key.read>, ReturnType<typeof ctEntry.read>>;
  ctAny: BpfMap<ReturnType<typeof ct4Key.read>, ReturnType<typeof ctEntry.read>>;
  metrics: BpfMap<ReturnType<typeof metricsKey.read>, Array<ReturnType<typeof metricsValue.read>>>;
  events: RawMap;
  /** Closes this process's fds and removes the pin directory. */
  remove(): Promise<void>;
}

export async function createTestDatapathMaps(): Promise<TestDatapathMaps> {
  // Not mounted at boot: the first test on a fresh machine mounts it.
  await ensureBpffs();
  const bpffsRoot = join(BPFFS_ROOT, `tdl-${randomBytes(4).toString('hex')}`);
  const pinDir = join(bpffsRoot, 'tendril');
  await mkdirPinDir(pinDir);
  const opened: Array<{ close(): void }> = [];
  const pinned = async <T extends { pin(path: string): void; close(): void }>(name: string, make: () => Promise<T>): Promise<T> => {
    const m = await make();
    opened.push(m);
    m.pin(join(pinDir, name));
    return m;
  };
  try {
    const maps = {
      endpoints: await pinned(MapName.ENDPOINTS, () => BpfMap.create({ name: MapName.ENDPOINTS, type: 'HASH', maxEntries: 64, flags: MapFlag.NO_PREALLOC }, endpointKey, endpointInfo)),
      ipcache: await pinned(MapName.IPCACHE, () => BpfMap.create({ name: MapName.IPCACHE, type: 'LPM_TRIE', maxEntries: 64, flags: MapFlag.NO_PREALLOC }, ipcacheKey, ipcacheValue)),
      policy: await pinned(MapName.POLICY, () => BpfMap.create({ name: MapName.POLICY, type: 'LPM_TRIE', maxEntries: 256, flags: MapFlag.NO_PREALLOC }, policyKey, policyEntry)),
      ctTcp: await pinned(MapName.CT_TCP, () => BpfMap.create({ name: MapName.CT_TCP, type: 'HASH', maxEntries: 256 }, ct4Key, ctEntry)),
      ctAny: await pinned(MapName.CT_ANY, () => BpfMap.create({ name: MapName.CT_ANY, type: 'HASH', maxEntries: 256 }, ct4Key, ctEntry)),
      metrics: await pinned(MapName.METRICS, () => BpfMap.create({ name: MapName.METRICS, type: 'PERCPU_HASH', maxEntries: 64 }, metricsKey, perCpuValue(metricsValue))),
      events: await pinned(MapName.EVENTS, () => RawMap.create({ name: MapName.EVENTS, type: 'RINGBUF', keySize: 0, valueSize: 0, maxEntries: 1 << 16 })),
    };
    opened.push(await pinned(MapName.CONFIG, () => BpfMap.create({ name: MapName.CONFIG, type: 'ARRAY', maxEntries: 1 }, codec.u32, datapathConfig)));
    return {
      pinDir,
      bpffsRoot,
      ...maps,
      remove: async () => {
        for (const m of opened) m.close();
        await removePinDir(bpffsRoot);
      },
    };
  } catch (err) {
    for (const m of opened) m.close();
    await removePinDir(bpffsRoot);
    throw err;
  }
}
