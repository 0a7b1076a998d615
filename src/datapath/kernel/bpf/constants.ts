/**
 * Numbers from the kernel's UAPI (include/uapi/linux/bpf.h) that TypeScript
 * needs. Debian's headers (6.1) predate tcx, so the tcx values are taken from
 * newer kernels, where they are fixed ABI.
 */

/** enum bpf_map_type (the ones tendril uses or may meet in a pinned dir). */
export const MapType = {
  HASH: 1,
  ARRAY: 2,
  PROG_ARRAY: 3,
  PERF_EVENT_ARRAY: 4,
  PERCPU_HASH: 5,
  PERCPU_ARRAY: 6,
  LRU_HASH: 9,
  LRU_PERCPU_HASH: 10,
  LPM_TRIE: 11,
  ARRAY_OF_MAPS: 12,
  HASH_OF_MAPS: 13,
  DEVMAP: 14,
  PERCPU_CGROUP_STORAGE: 21,
  RINGBUF: 27,
} as const;
export type MapTypeName = keyof typeof MapType;

/** Map types whose values hold one slot per possible CPU. */
export const PER_CPU_MAP_TYPES: ReadonlySet<number> = new Set([
  MapType.PERCPU_HASH,
  MapType.PERCPU_ARRAY,
  MapType.LRU_PERCPU_HASH,
  MapType.PERCPU_CGROUP_STORAGE,
]);

/** Map types whose values are inner maps (an fd in, an ID out). */
export const MAP_OF_MAPS_TYPES: ReadonlySet<number> = new Set([MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS]);

/** BPF_MAP_CREATE flags. */
export const MapFlag = {
  NO_PREALLOC: 1 << 0,
  NO_COMMON_LRU: 1 << 1,
  RDONLY_PROG: 1 << 7,
  WRONLY_PROG: 1 << 8,
} as const;

/** BPF_MAP_UPDATE_ELEM flags, by the names callers use. */
export const UpdateFlag = { any: 0, noexist: 1, exist: 2 } as const;
export type UpdateMode = keyof typeof UpdateFlag;

/** enum bpf_prog_type (the ones tendril loads). */
export const ProgType = {
  SOCKET_FILTER: 1,
  SCHED_CLS: 3,
  SCHED_ACT: 4,
  XDP: 6,
  CGROUP_SKB: 8,
} as const;

/** enum bpf_attach_type: tcx hooks (kernel 6.6+). */
export const AttachType = {
  TCX_INGRESS: 46,
  TCX_EGRESS: 47,
} as const;

/** enum bpf_link_type. */
export const LinkType = {
  XDP: 6,
  TCX: 11,
  NETKIT: 13,
} as const;

/** Placement flags of BPF_LINK_CREATE for multi-program hooks (tcx). */
export const LinkFlag = {
  BEFORE: 1 << 3,
  AFTER: 1 << 4,
} as const;

/** tc verdicts a sched_cls program returns (TC_ACT_*; tcx reads 0 as pass, 2 as drop). */
export const TcAction = {
  UNSPEC: -1,
  OK: 0,
  SHOT: 2,
  REDIRECT: 7,
} as const;

/** Default bpffs mount point. */
export const BPFFS_ROOT = '/sys/fs/bpf';

/** The kernel's limit on map and program names (BPF_OBJ_NAME_LEN - 1). */
export const MAX_OBJ_NAME = 15;
