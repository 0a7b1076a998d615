import { KernelError, errnoNumber } from '../errors.js';
import { loadAddon } from '../native.js';

/**
 * The addon's `bpf` functions (src/datapath/kernel/native/bpf*.c), typed.
 * Handles are opaque externals owning one fd each; the native side checks
 * every key and value length against the sizes the kernel reported.
 *
 * Element operations on ordinary maps (lookup, update, delete, next key),
 * pins and info are synchronous: each is one bpf() call of a few
 * microseconds, cheaper than a round trip through libuv's pool. Everything
 * that can take longer returns a promise and runs off the event loop: map
 * creation (a preallocated hash fills every element first), writes and
 * deletes on maps of maps (the kernel waits for an RCU grace period), object
 * load and verification, batch updates, dumps, test runs, tcx attach (which
 * may enter a namespace) and detach (another grace period). The synchronous
 * update and delete refuse maps of maps with a TypeError.
 */
export interface NativeHandle {
  readonly __brand: 'tendril bpf handle';
}

export interface NativeRingReader {
  readonly __brand: 'tendril ring buffer reader';
}

export interface NativeMapInfo {
  name: string;
  id: number;
  type: number;
  keySize: number;
  valueSize: number;
  /** Bytes of one value in lookups and updates: valueSize, or per-CPU slots (8-byte aligned) × possible CPUs. */
  valueBufferSize: number;
  maxEntries: number;
  flags: number;
  /** The map's BTF object and its key and value types there (0 = the map was made without BTF). */
  btfId: number;
  btfKeyTypeId: number;
  btfValueTypeId: number;
}

export interface NativeMapCreate {
  type: number;
  name: string;
  keySize: number;
  valueSize: number;
  maxEntries: number;
  flags?: number;
  innerMap?: NativeHandle;
}

export interface NativeLoadedProgram {
  handle: NativeHandle;
  name: string;
  section: string;
  type: number;
  expectedAttachType: number;
  id: number;
  tag: string;
}

export interface NativeLoadedMap {
  handle: NativeHandle;
  name: string;
  pinPath: string | null;
  reusedPin: boolean;
  internal: boolean;
}

export interface NativeLoadResult {
  programs: NativeLoadedProgram[];
  maps: NativeLoadedMap[];
  log?: string;
}

export interface NativeLinkInfo {
  id: number;
  type: number;
  progId: number;
  ifindex?: number;
  attachType?: number;
}

export interface NativeProgInfo {
  id: number;
  type: number;
  name: string;
  tag: string;
  /** The verifier's processed instructions when the program was loaded. */
  verifiedInsns: number;
}

export interface NativeTestRunResult {
  retval: number;
  duration: number;
  data: Buffer;
  ctx?: Buffer;
}

export interface NativeBpf {
  close(h: NativeHandle): void;
  fd(h: NativeHandle): number;
  objPin(h: NativeHandle, path: string): void;
  objGet(path: string, kind: 'map' | 'prog' | 'link'): NativeHandle;
  unpin(path: string): void;
  isBpffs(path: string): boolean;
  mountBpffs(path: string): void;
  possibleCpus(): number;

  mapCreate(spec: NativeMapCreate): Promise<NativeHandle>;
  mapInfo(h: NativeHandle): NativeMapInfo;
  mapLookup(h: NativeHandle, key: Uint8Array, flags: number): Buffer | undefined;
  mapUpdate(h: NativeHandle, key: Uint8Array, value: Uint8Array, flags: number): void;
  mapDelete(h: NativeHandle, key: Uint8Array): boolean;
  mapNextKey(h: NativeHandle, key: Uint8Array | null): Buffer | undefined;
  /** ARRAY_OF_MAPS / HASH_OF_MAPS only: the native side passes a dup of the inner map's fd. */
  mapSetInner(h: NativeHandle, key: Uint8Array, inner: NativeHandle, flags: number): Promise<void>;
  mapDeleteInner(h: NativeHandle, key: Uint8Array): Promise<boolean>;
  mapUpdateBatch(h: NativeHandle, keys: Uint8Array, values: Uint8Array, count: number, flags: number): Promise<{ count: number; batched: boolean }>;
  mapDump(h: NativeHandle, afterKey: Uint8Array | null, max: number, withValues: boolean): Promise<{ count: number; more: boolean; keys: Buffer; values?: Buffer }>;
  mapLookupBatch(h: NativeHandle, cursor: Uint8Array | null, max: number): Promise<{ count: number; keys: Buffer; cursor: Buffer | null }>;

  objectLoad(path: string, opts: { pinRoot?: string; maxEntries?: Array<[string, number]> }): Promise<NativeLoadResult>;

  tcxAttach(prog: NativeHandle, ifindex: number, attachType: number, flags: number, netns: string | null): Promise<NativeHandle>;
  linkUpdate(link: NativeHandle, prog: NativeHandle, expected: NativeHandle | null): void;
  linkDetach(link: NativeHandle): Promise<void>;
  linkInfo(link: NativeHandle): NativeLinkInfo;
  progInfo(prog: NativeHandle): NativeProgInfo;
  progTestRun(
    prog: NativeHandle,
    opts: { data: Uint8Array; dataOutSize: number; ctx?: Uint8Array; ctxOutSize?: number; repeat: number; flags: number },
  ): Promise<NativeTestRunResult>;

  ringbufOpen(
    map: NativeHandle,
    onRecords: (records: Buffer[] | null, error?: Error) => void,
    opts: { maxRecordSize?: number; coalesceMs?: number },
  ): NativeRingReader;
  ringbufStop(reader: NativeRingReader): Promise<void>;
  ringbufStats(reader: NativeRingReader): { records: number; batches: number; oversized: number };
  ringbufRef(reader: NativeRingReader, keepAlive: boolean): void;
}

let cached: NativeBpf | undefined;

/** The addon's bpf functions. */
export function nativeBpf(): NativeBpf {
  if (cached === undefined) {
    const addon = loadAddon() as { bpf?: NativeBpf };
    if (addon.bpf === undefined) throw new Error('tendril kernel addon has no bpf part (rebuild with `make native`)');
    cached = addon.bpf;
  }
  return cached;
}

/** What the addon attaches to errno failures. */
interface AddonError extends Error {
  errno: number;
  syscall?: string;
  log?: string;
}

function isAddonError(err: unknown): err is AddonError {
  return err instanceof Error && typeof (err as Partial<AddonError>).errno === 'number';
}

/**
 * Turns the addon's errno failure into a KernelError whose operation is the
 * addon's (e.g. "BPF_MAP_UPDATE_ELEM tdl_count") and whose kernelMessage is
 * libbpf's log when there was one (the verifier's, a pinned map's mismatch).
 * TypeErrors and RangeErrors for bad arguments pass through unchanged.
 */
export function toBpfError(err: unknown): unknown {
  if (err instanceof KernelError || !isAddonError(err)) return err;
  let errno = Math.abs(err.errno);
  let log = err.log;
  if (errno === KERNEL_ENOTSUPP) {
    // The kernel-internal ENOTSUPP leaks out of bpf() for operations a map type lacks.
    errno = errnoNumber('EOPNOTSUPP');
    log = ['the map or program type does not support this operation (kernel ENOTSUPP, 524)', log].filter(Boolean).join('\n');
  }
  return new KernelError(errno, err.syscall ?? 'bpf', log, { cause: err });
}

/** include/linux/errno.h: not a userspace errno, but bpf() returns it. */
const KERNEL_ENOTSUPP = 524;

/** Runs a synchronous addon call, rethrowing errno failures as KernelError. */
export function bpfSync<T>(call: () => T): T {
  try {
    return call();
  } catch (err) {
    throw toBpfError(err);
  }
}

/** Awaits an asynchronous addon call, rethrowing errno failures as KernelError. */
export async function bpfAsync<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw toBpfError(err);
  }
}
