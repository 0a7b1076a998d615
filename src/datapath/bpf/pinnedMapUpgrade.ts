/**
 * Pinned maps whose type changed between releases. Conntrack and SNAT were
 * LRU hashes; they are plain hashes now (a full table refuses a new flow
 * instead of evicting a live one). libbpf refuses to reuse a pin of another
 * type, and the pins hold the connections of every pod on the node: before
 * the objects load, each old pin is copied into a map of the new type,
 * which takes the pin's place. Packets the old programs track between the
 * copy and the new programs' attach are the only ones not carried over.
 */
import { existsSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '../../logging/logger.js';
import { RawMap } from '../kernel/bpf/index.js';
import { isKernelError } from '../kernel/errors.js';
import { MapName, type MapNameValue } from './constants.js';

const BPF_MAP_TYPE_HASH = 1;
const BPF_MAP_TYPE_LRU_HASH = 9;
/** Entries per batch write while copying. */
const COPY_BATCH = 4096;

const RETYPED: ReadonlyArray<{ name: MapNameValue; from: number; to: number }> = [
  { name: MapName.CT_TCP, from: BPF_MAP_TYPE_LRU_HASH, to: BPF_MAP_TYPE_HASH },
  { name: MapName.CT_ANY, from: BPF_MAP_TYPE_LRU_HASH, to: BPF_MAP_TYPE_HASH },
  { name: MapName.SNAT, from: BPF_MAP_TYPE_LRU_HASH, to: BPF_MAP_TYPE_HASH },
];

export interface RetypedMap {
  map: MapNameValue;
  copied: number;
  /** Entries the new map had no room for (a smaller size configured). */
  dropped: number;
}

/** Carries every pinned map of an old type in `pinDir` over to its new type, at the size the objects will ask for. */
export async function upgradePinnedMaps(pinDir: string, sizes: Readonly<Record<string, number>>, log: Logger): Promise<RetypedMap[]> {
  const done: RetypedMap[] = [];
  for (const { name, from, to } of RETYPED) {
    const path = join(pinDir, name);
    if (!existsSync(path)) continue;
    const old = RawMap.openPinned(path);
    try {
      if (old.info.type !== from) continue;
      const next = await RawMap.create({ type: to, name, keySize: old.info.keySize, valueSize: old.info.valueSize, maxEntries: sizes[name] ?? old.info.maxEntries });
      try {
        const result = await copyEntries(old, next);
        // Pinned beside the old one, then renamed over it: the pin path never names no map.
        const tmp = `${path}_upgrade`; // bpffs takes no dot in a name
        next.pin(tmp);
        renameSync(tmp, path);
        done.push({ map: name, ...result });
        log.info({ map: name, ...result }, 'pinned map carried over to its new type');
      } finally {
        next.close();
      }
    } finally {
      old.close();
    }
  }
  return done;
}

async function copyEntries(from: RawMap, to: RawMap): Promise<{ copied: number; dropped: number }> {
  let copied = 0;
  let dropped = 0;
  let batch: Array<[Buffer, Buffer]> = [];
  const flush = async () => {
    try {
      copied += (await to.updateBatch(batch)).count;
    } catch (err) {
      if (!isKernelError(err, 'E2BIG') && !isKernelError(err, 'ENOMEM')) throw err;
      // The new map is full: the rest one by one, counting what does not fit.
      for (const [k, v] of batch) {
        try {
          to.update(k, v);
          copied++;
        } catch (e) {
          if (!isKernelError(e, 'E2BIG') && !isKernelError(e, 'ENOMEM')) throw e;
          dropped++;
        }
      }
    }
    batch = [];
  };
  for await (const [k, v] of from.entries()) {
    batch.push([Buffer.from(k), Buffer.from(v)]);
    if (batch.length >= COPY_BATCH) await flush();
  }
  if (batch.length > 0) await flush();
  return { copied, dropped };
}
