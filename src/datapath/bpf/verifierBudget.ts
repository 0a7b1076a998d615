/**
 * The verifier's budget: the instructions it processed to accept each
 * program of each datapath object, as built by each supported compiler
 * (`make build` writes build/bpf/clang-<N>/; the objects the agent loads,
 * build/bpf/*.o, are clang 14's). The kernel refuses a program past
 * BPF_COMPLEXITY_LIMIT_INSNS; tendril keeps every program under half of it,
 * so that a compiler's other choices or the paths IPv6 adds cannot push one
 * over on one compiler and not another. verifierBudget.test.ts holds the
 * programs to it; `make bench` prints the counts.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { BpfObject } from '../kernel/bpf/index.js';
import { KernelError } from '../kernel/errors.js';
import { DatapathError } from '../types.js';
import { GC_OBJECT_FILE } from './gcProgram.js';
import { DEFAULT_OBJECT_DIR, HOST_OBJECT_FILE, LXC_OBJECT_FILE, NETDEV_OBJECT_FILE, OVERLAY_OBJECT_FILE } from './objects.js';

/** The kernel's BPF_COMPLEXITY_LIMIT_INSNS: processed instructions past it refuse the program. */
export const VERIFIER_INSN_LIMIT = 1_000_000;
/** What one program may use: half the kernel's limit. */
export const VERIFIER_INSN_BUDGET = VERIFIER_INSN_LIMIT / 2;

/** The compilers every object is built with (the Makefile's BPF_COMPILERS, one directory each under build/bpf/). */
export const BPF_COMPILERS = ['clang-14', 'clang-16', 'clang-19'] as const;
export type BpfCompiler = (typeof BPF_COMPILERS)[number];

/** Every object the datapath loads, the GC program's included. */
export const BUDGET_OBJECT_FILES = [LXC_OBJECT_FILE, HOST_OBJECT_FILE, NETDEV_OBJECT_FILE, OVERLAY_OBJECT_FILE, GC_OBJECT_FILE] as const;

export interface ProgramCount {
  compiler: BpfCompiler;
  object: string;
  /** The program's name; for a refused object, the one the verifier refused (or the object's name when the log names none). */
  program: string;
  /** Processed instructions; for a refused program, what the verifier's log says it reached (undefined when it says nothing). */
  insns: number | undefined;
  /** Why the object did not load (libbpf's and the verifier's last words), when it did not. */
  error?: string;
}

/** build/bpf/<compiler>/ beside the runtime objects. */
export function compilerObjectDir(compiler: BpfCompiler, objectDir: string = DEFAULT_OBJECT_DIR): string {
  return join(objectDir, compiler);
}

const PROCESSED = /processed (\d+) insns/g;
const REFUSED_PROG = /prog '([^']+)': (?:BPF program load failed|failed to load)/;

/** Statistics lines the verifier prints before its count: not why it refused. */
const STATS_LINE = /^(verification time|stack depth|processed \d+ insns)/;

/**
 * The count and program a refused load's log names: the last "processed N
 * insns" line is the refused program's, and the verifier's last words before
 * its statistics say why.
 */
function refusal(compiler: BpfCompiler, object: string, err: KernelError): ProgramCount {
  const log = err.kernelMessage ?? '';
  const counts = [...log.matchAll(PROCESSED)].map((m) => Number(m[1]));
  const lines = log.split('\n').map((l) => l.trim());
  const statsAt = lines.map((l) => l.startsWith('processed ')).lastIndexOf(true);
  const why = (statsAt > 0 ? lines.slice(0, statsAt) : lines).filter((l) => l !== '' && !STATS_LINE.test(l)).slice(-2).join(' | ');
  return {
    compiler,
    object,
    program: REFUSED_PROG.exec(log)?.[1] ?? object,
    insns: counts.length > 0 ? counts[counts.length - 1] : undefined,
    error: `${err.operation}: ${err.code}${why ? ` — ${why}` : ''}`,
  };
}

/**
 * Loads one object (no pins: nothing is left behind) and reads each
 * program's verified instruction count from the kernel (bpf_prog_info).
 * A refused load is one entry with its error; other failures throw.
 */
export async function measureObject(compiler: BpfCompiler, object: string, objectDir?: string): Promise<ProgramCount[]> {
  const path = join(compilerObjectDir(compiler, objectDir), object);
  if (!existsSync(path)) throw new DatapathError('failed', `eBPF object ${path} is missing: make build compiles every object with ${BPF_COMPILERS.join(', ')}`);
  let obj: BpfObject;
  try {
    obj = await BpfObject.load(path);
  } catch (err) {
    if (err instanceof KernelError && err.operation.startsWith('bpf_object__load')) return [refusal(compiler, object, err)];
    throw err;
  }
  try {
    return [...obj.programs.values()].map((p) => ({ compiler, object, program: p.name, insns: p.verifiedInsns }));
  } finally {
    obj.close();
  }
}

/** Every object with every compiler, one after another (each load runs the verifier on a pool thread). */
export async function measureAll(objectDir?: string): Promise<ProgramCount[]> {
  const out: ProgramCount[] = [];
  for (const compiler of BPF_COMPILERS) {
    for (const object of BUDGET_OBJECT_FILES) out.push(...(await measureObject(compiler, object, objectDir)));
  }
  return out;
}

/** Whether a count is within the budget (a refused program never is). */
export function withinBudget(c: ProgramCount): boolean {
  return c.error === undefined && c.insns !== undefined && c.insns <= VERIFIER_INSN_BUDGET;
}

/** One row per program, one column per compiler: processed instructions and the share of the kernel's limit. */
export function formatCounts(counts: readonly ProgramCount[]): string {
  const key = (c: ProgramCount) => `${c.object} ${c.program}`;
  const rows = [...new Set(counts.map(key))];
  const cell = (c: ProgramCount | undefined): string => {
    if (!c) return '-';
    const n = c.insns === undefined ? '?' : `${c.insns} (${((100 * c.insns) / VERIFIER_INSN_LIMIT).toFixed(1)}%)`;
    return c.error === undefined ? n : `REFUSED at ${n}`;
  };
  const table = [['object program', ...BPF_COMPILERS]];
  for (const r of rows) table.push([r, ...BPF_COMPILERS.map((comp) => cell(counts.find((c) => c.compiler === comp && key(c) === r)))]);
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  const lines = table.map((row) => row.map((v, i) => v.padEnd(widths[i]!)).join('  ').trimEnd());
  const errors = counts.filter((c) => c.error !== undefined).map((c) => `${c.compiler} ${c.object}: ${c.error}`);
  return [
    `verifier: processed instructions per program (budget ${VERIFIER_INSN_BUDGET} = half of the kernel's ${VERIFIER_INSN_LIMIT})`,
    ...lines,
    ...errors,
  ].join('\n');
}
