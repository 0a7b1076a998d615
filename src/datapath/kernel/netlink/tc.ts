import { bytesToMac } from './address.js';
import { MessageBuilder, type NetlinkMessage, decodeTcMsg, encodeTcMsg, htons } from './codec.js';
import {
  AF_UNSPEC,
  ETH_P_ALL,
  NLM_F_CREATE,
  NLM_F_EXCL,
  RTM,
  TC_H_CLSACT,
  TC_H_CLSACT_HANDLE,
  TC_H_EGRESS_PARENT,
  TC_H_INGRESS_PARENT,
  TCA,
  TCA_BPF,
  TCA_BPF_FLAG_ACT_DIRECT,
} from './constants.js';

/** A clsact hook. */
export type TcDirection = 'ingress' | 'egress';

export interface Qdisc {
  index: number;
  kind: string;
  handle: number;
  parent: number;
}

export interface BpfFilterSpec {
  index: number;
  direction: TcDirection;
  /** File descriptor of a loaded BPF_PROG_TYPE_SCHED_CLS program. */
  fd: number;
  /** Shown by `tc filter show` and returned by listBpfFilters. */
  name?: string;
  /** The program's return code is the verdict (TC_ACT_*); true unless set false. */
  directAction?: boolean;
  /** Filter priority (also its preference); 1 unless given. */
  priority?: number;
  /** Filter handle; 1 unless given. */
  handle?: number;
  /** Replace a filter with the same priority and handle instead of failing with EEXIST. */
  replace?: boolean;
}

export interface BpfFilter {
  index: number;
  direction: TcDirection;
  priority: number;
  handle: number;
  name?: string;
  /** The program's ID (bpftool prog show id N). */
  programId?: number;
  /** The program's tag (hex), a hash of its instructions. */
  tag?: string;
  directAction: boolean;
}

function parentOf(direction: TcDirection): number {
  return direction === 'ingress' ? TC_H_INGRESS_PARENT : TC_H_EGRESS_PARENT;
}

function checkIndex(index: number): void {
  if (!Number.isInteger(index) || index <= 0) throw new RangeError(`interface index ${index} is not positive`);
}

function checkU16(what: string, v: number, min: number): void {
  if (!Number.isInteger(v) || v < min || v > 0xffff) throw new RangeError(`${what} ${v} is outside ${min}..65535`);
}

/** tcm_info of a filter: its priority in the high half, the protocol (network order) in the low. */
function filterInfo(priority: number): number {
  return ((priority << 16) | htons(ETH_P_ALL)) >>> 0;
}

function clsact(type: number, flags: number, index: number): MessageBuilder {
  checkIndex(index);
  return new MessageBuilder(type, flags)
    .struct(encodeTcMsg({ family: AF_UNSPEC, index, handle: TC_H_CLSACT_HANDLE, parent: TC_H_CLSACT }))
    .string(TCA.KIND, 'clsact');
}

export function encodeAddClsact(index: number): MessageBuilder {
  return clsact(RTM.NEWQDISC, NLM_F_CREATE | NLM_F_EXCL, index);
}

export function encodeDeleteClsact(index: number): MessageBuilder {
  return clsact(RTM.DELQDISC, 0, index);
}

export function encodeListQdiscs(index?: number): MessageBuilder {
  return new MessageBuilder(RTM.GETQDISC, 0).struct(encodeTcMsg({ family: AF_UNSPEC, index: index ?? 0 }));
}

export function decodeQdisc(msg: NetlinkMessage): Qdisc {
  const { header, attrs } = decodeTcMsg(msg.payload);
  return { index: header.index, kind: attrs.string(TCA.KIND) ?? '', handle: header.handle, parent: header.parent };
}

export function encodeAddBpfFilter(spec: BpfFilterSpec): MessageBuilder {
  checkIndex(spec.index);
  const priority = spec.priority ?? 1;
  const handle = spec.handle ?? 1;
  checkU16('filter priority', priority, 1);
  if (!Number.isInteger(handle) || handle < 1 || handle > 0xffffffff) throw new RangeError(`filter handle ${handle} is outside 1..2^32-1`);
  if (!Number.isInteger(spec.fd) || spec.fd < 0) throw new RangeError(`program fd ${spec.fd} is not a descriptor`);
  // Without NLM_F_EXCL the kernel changes a filter of the same priority and handle in place.
  const b = new MessageBuilder(RTM.NEWTFILTER, NLM_F_CREATE | (spec.replace === true ? 0 : NLM_F_EXCL)).struct(
    encodeTcMsg({ family: AF_UNSPEC, index: spec.index, handle, parent: parentOf(spec.direction), info: filterInfo(priority) }),
  );
  b.string(TCA.KIND, 'bpf');
  b.nest(TCA.OPTIONS, (o) => {
    o.u32(TCA_BPF.FD, spec.fd);
    if (spec.name !== undefined) o.string(TCA_BPF.NAME, spec.name);
    o.u32(TCA_BPF.FLAGS, spec.directAction === false ? 0 : TCA_BPF_FLAG_ACT_DIRECT);
  });
  return b;
}

/** Deletes one filter (priority and handle) or, with no handle, every filter of that priority. */
export function encodeDeleteBpfFilter(spec: { index: number; direction: TcDirection; priority: number; handle?: number }): MessageBuilder {
  checkIndex(spec.index);
  checkU16('filter priority', spec.priority, 1);
  return new MessageBuilder(RTM.DELTFILTER, 0)
    .struct(encodeTcMsg({ family: AF_UNSPEC, index: spec.index, handle: spec.handle ?? 0, parent: parentOf(spec.direction), info: filterInfo(spec.priority) }))
    .string(TCA.KIND, 'bpf');
}

export function encodeListFilters(index: number, direction: TcDirection): MessageBuilder {
  checkIndex(index);
  return new MessageBuilder(RTM.GETTFILTER, 0).struct(encodeTcMsg({ family: AF_UNSPEC, index, parent: parentOf(direction) }));
}

/** A cls_bpf filter from a filter dump; undefined for other kinds and for the per-priority chain heads (handle 0). */
export function decodeBpfFilter(msg: NetlinkMessage, direction: TcDirection): BpfFilter | undefined {
  const { header, attrs } = decodeTcMsg(msg.payload);
  if (attrs.string(TCA.KIND) !== 'bpf' || header.handle === 0) return undefined;
  const opts = attrs.nested(TCA.OPTIONS);
  const f: BpfFilter = {
    index: header.index,
    direction,
    priority: header.info >>> 16,
    handle: header.handle,
    directAction: ((opts?.u32(TCA_BPF.FLAGS) ?? 0) & TCA_BPF_FLAG_ACT_DIRECT) !== 0,
  };
  const name = opts?.string(TCA_BPF.NAME);
  if (name !== undefined) f.name = name;
  const id = opts?.u32(TCA_BPF.ID);
  if (id !== undefined) f.programId = id;
  const tag = opts?.get(TCA_BPF.TAG);
  if (tag !== undefined) f.tag = bytesToMac(tag).replaceAll(':', '');
  return f;
}
