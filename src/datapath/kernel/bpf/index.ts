/**
 * bpf() for the agent: ELF objects through libbpf with pinned maps, typed
 * maps and maps of maps, tcx links (clsact fallback), BPF_PROG_TEST_RUN and
 * ring buffers.
 * Failures are KernelErrors (errno, code, operation; libbpf's log as
 * kernelMessage).
 */
export * as codec from './codec.js';
export type { Codec, CodecValue, LpmKey, StructValue } from './codec.js';
export { AttachType, BPFFS_ROOT, LinkType, MAP_OF_MAPS_TYPES, MAX_OBJ_NAME, MapFlag, MapType, type MapTypeName, PER_CPU_MAP_TYPES, ProgType, TcAction, UpdateFlag, type UpdateMode } from './constants.js';
export { possibleCpus, parseCpuList } from './cpus.js';
export { bpffsOrigin, PRIVATE_BPFFS_FIX, type BpffsOrigin } from './bpffsOrigin.js';
export { ensureBpffs, isOnBpffs, mkdirPinDir, removePinDir, unpin } from './bpffs.js';
export { BpfMap, RawMap, perCpuValue, shapeMismatches, type MapInfo, type MapShape, type MapSpec, type PerCpuCodec, type TypedMapSpec } from './map.js';
export { MapOfMaps, type InnerMap, type MapOfMapsSpec } from './mapOfMaps.js';
export { BpfProgram, MAX_TEST_RUN_REPEAT, type TestRunInput, type TestRunResult } from './program.js';
export { BpfObject, type LoadOptions, type LoadedMap } from './object.js';
export { TcxLink, type Direction, type TcxAttachOptions, type TcxLinkInfo } from './link.js';
export { attach, tcxSupport, type AttachMode, type AttachRequest, type Attachment } from './attach.js';
export { RingBufferReader, type RingBufferOptions, type RingBufferStats } from './ringbuf.js';
