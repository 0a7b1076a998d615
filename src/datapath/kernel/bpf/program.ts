import { type NativeHandle, bpfAsync, bpfSync, nativeBpf } from './native.js';

export interface TestRunInput {
  /** The packet (from its Ethernet header for sched_cls programs). */
  data: Uint8Array;
  /** Runs of the program (1 to MAX_TEST_RUN_REPEAT, 1 unless given); the duration is the kernel's mean per run. */
  repeat?: number;
  /** Room for the packet the program leaves; input length + 512 unless given. */
  dataOutSize?: number;
  /** A context to start from (struct __sk_buff for sched_cls: mark, ifindex, ...). */
  ctx?: Uint8Array;
  /** Room for the context after the run; no context is returned without it. */
  ctxOutSize?: number;
  flags?: number;
}

export interface TestRunResult {
  /** The program's return value (a TC_ACT_* verdict for sched_cls). */
  retval: number;
  /** Mean nanoseconds per run, as the kernel measured it. */
  durationNs: number;
  /** The packet after the run. */
  data: Buffer;
  ctx?: Buffer;
}

export interface ProgramMeta {
  /** The program's full name (the kernel keeps 15 bytes of it). */
  name: string;
  /** The ELF section it came from, when loaded from an object. */
  section?: string;
}

const MAX_TEST_DATA = 1 << 20;

/**
 * The most runs one testRun may ask for: a run holds one of libuv's four
 * pool threads until it ends, and a million runs of a short program take
 * well under a second.
 */
export const MAX_TEST_RUN_REPEAT = 1_000_000;

/** A loaded BPF program: attach it, pin it, or run packets through it. */
export class BpfProgram {
  readonly name: string;
  readonly section: string | undefined;
  /** enum bpf_prog_type. */
  readonly type: number;
  /** The kernel's program ID (what link info reports as progId). */
  readonly id: number;
  /** Hash of the program's instructions, hex. */
  readonly tag: string;
  /** Instructions the verifier processed to accept it (its budget is BPF_COMPLEXITY_LIMIT_INSNS). */
  readonly verifiedInsns: number;
  readonly #handle: NativeHandle;

  /** Takes ownership of a native program handle. */
  constructor(handle: NativeHandle, meta?: ProgramMeta) {
    this.#handle = handle;
    const info = bpfSync(() => nativeBpf().progInfo(handle));
    this.name = meta?.name ?? info.name;
    this.section = meta?.section;
    this.type = info.type;
    this.id = info.id;
    this.tag = info.tag;
    this.verifiedInsns = info.verifiedInsns;
  }

  static openPinned(path: string): BpfProgram {
    return new BpfProgram(bpfSync(() => nativeBpf().objGet(path, 'prog')));
  }

  handle(): NativeHandle {
    return this.#handle;
  }

  /** The program's fd in this process (valid until close), e.g. for a tc filter. */
  get fd(): number {
    return bpfSync(() => nativeBpf().fd(this.#handle));
  }

  pin(path: string): void {
    bpfSync(() => nativeBpf().objPin(this.#handle, path));
  }

  /**
   * BPF_PROG_TEST_RUN: runs the program on `data` in the kernel, with its
   * real maps, so map side effects are visible afterwards.
   */
  testRun(input: TestRunInput): Promise<TestRunResult> {
    const repeat = input.repeat ?? 1;
    if (!Number.isInteger(repeat) || repeat < 1 || repeat > MAX_TEST_RUN_REPEAT) {
      return Promise.reject(new RangeError(`test run repeat must be an integer from 1 to ${MAX_TEST_RUN_REPEAT}, got ${repeat}`));
    }
    const dataOutSize = input.dataOutSize ?? Math.min(input.data.length + 512, MAX_TEST_DATA);
    return bpfAsync(async () => {
      const r = await nativeBpf().progTestRun(this.#handle, {
        data: input.data,
        dataOutSize,
        ...(input.ctx ? { ctx: input.ctx } : {}),
        ...(input.ctxOutSize !== undefined ? { ctxOutSize: input.ctxOutSize } : {}),
        repeat,
        flags: input.flags ?? 0,
      });
      return { retval: r.retval | 0, durationNs: r.duration, data: r.data, ...(r.ctx ? { ctx: r.ctx } : {}) };
    });
  }

  /** Closes this process's fd (idempotent); attached or pinned programs stay loaded. */
  close(): void {
    nativeBpf().close(this.#handle);
  }
}
