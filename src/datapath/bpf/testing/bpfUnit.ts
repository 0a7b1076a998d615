/**
 * The runner of the datapath's C unit tests (bpf/tests/*.c, built into
 * build/bpf/tests/): finds each test's PKTGEN, SETUP and CHECK programs by
 * name (bpf/tests/lib/test.h), runs them in that order through
 * BPF_PROG_TEST_RUN on a fresh load of the object, and reads the result
 * CHECK left in tdl_test_result.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BpfObject, codec } from '../../kernel/bpf/index.js';
import { Btf } from '../btf.js';
import { TEST_MAP_SIZES } from './programHarness.js';

export const UNIT_TEST_DIR = fileURLToPath(new URL('../../../../../build/bpf/tests/', import.meta.url));
/** Where the objects' sources are: a failure quotes its line. */
export const UNIT_TEST_SOURCE_DIR = fileURLToPath(new URL('../../../../../bpf/tests/', import.meta.url));

/** test.h's TEST_* codes: what CHECK returns and records. */
export const TestStatus = { PASS: 1, FAIL: 2, ERROR: 3 } as const;

const TEST_EXPR_LEN = 96;
const RESULT_MAP = 'tdl_test_result';
const testResult = codec.struct({
  status: codec.u32,
  line: codec.u32,
  checks: codec.u32,
  hasValues: codec.u32,
  got: codec.u64,
  want: codec.u64,
  expr: codec.bytes(TEST_EXPR_LEN),
});

/** The first frame: an Ethernet header of zeros (BPF_PROG_TEST_RUN takes nothing shorter), grown by PKTGEN. */
const EMPTY_FRAME_LEN = 14;
/** Room for the frame a stage leaves. */
const FRAME_OUT_MAX = 4096;
/** struct __sk_buff up to the end of cb[5]; cb[0] carries SETUP's return value to CHECK. */
const SKB_CB0_OFFSET = 48;
const SKB_CTX_WITH_CB = 68;

const STAGE = /^test__(.+)__(pktgen|setup|check)$/;

export interface UnitTest {
  name: string;
  pktgen?: string;
  setup?: string;
  check: string;
}

export interface UnitTestOutcome {
  passed: boolean;
  /** Why it failed: the assertion's line and text (and both values), or the stage that could not run. */
  message: string;
  /** Assertions CHECK evaluated. */
  checks: number;
}

/** The built test objects (build/bpf/tests/*.o), sorted; none before `make build`. */
export function unitTestObjects(dir = UNIT_TEST_DIR): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith('.o'))
    .sort()
    .map((f) => join(dir, f));
}

/** The tests among an object's program names; a PKTGEN or SETUP without its CHECK is an error. */
export function unitTestsOf(programNames: Iterable<string>): UnitTest[] {
  const stages = new Map<string, Partial<Record<'pktgen' | 'setup' | 'check', string>>>();
  for (const p of programNames) {
    const m = STAGE.exec(p);
    if (!m) continue;
    const [, name, stage] = m as unknown as [string, string, 'pktgen' | 'setup' | 'check'];
    stages.set(name, { ...stages.get(name), [stage]: p });
  }
  const tests: UnitTest[] = [];
  for (const [name, s] of stages) {
    if (!s.check) throw new Error(`test ${name} has ${Object.keys(s).join(' and ')} but no CHECK`);
    tests.push({ name, check: s.check, ...(s.pktgen ? { pktgen: s.pktgen } : {}), ...(s.setup ? { setup: s.setup } : {}) });
  }
  return tests.sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * Map sizes for a test object: the harness's small sizes for the datapath
 * maps it has (the defaults preallocate hundreds of MiB); its own maps as
 * declared.
 */
export function unitTestMapSizes(objectPath: string): Record<string, number> {
  const present = new Set(
    Btf.ofFile(objectPath)
      .maps()
      .map((m) => m.name),
  );
  return Object.fromEntries(Object.entries(TEST_MAP_SIZES).filter(([name]) => present.has(name)));
}

/** Loads the object once (every program must pass the verifier) and lists its tests. */
export async function loadUnitTests(objectPath: string): Promise<{ tests: UnitTest[]; sizes: Record<string, number> }> {
  const sizes = unitTestMapSizes(objectPath);
  const object = await BpfObject.load(objectPath, { maxEntries: sizes });
  try {
    return { tests: unitTestsOf(object.programs.keys()), sizes };
  } finally {
    object.close();
  }
}

/**
 * The failed assertion's source line, quoted: the recorded expression is
 * the one after macro expansion (an assertion inside a test's own macro
 * shows its arguments as numbers). Empty when the source is not beside
 * the build (an object run from elsewhere).
 */
function quoteLine(objectPath: string, line: number): string {
  const source = join(UNIT_TEST_SOURCE_DIR, relative(UNIT_TEST_DIR, objectPath).replace(/\.o$/, '.c'));
  if (!existsSync(source)) return '';
  const text = readFileSync(source, 'utf8').split('\n')[line - 1]?.trim();
  return text ? ` \`${text}\`` : '';
}

function cbContext(cb0: number): Buffer {
  const ctx = Buffer.alloc(SKB_CTX_WITH_CB);
  ctx.writeInt32LE(cb0, SKB_CB0_OFFSET);
  return ctx;
}

/** Runs one test on a fresh load of its object (empty maps): PKTGEN → SETUP → CHECK. */
export async function runUnitTest(objectPath: string, test: UnitTest, sizes: Record<string, number>): Promise<UnitTestOutcome> {
  const object = await BpfObject.load(objectPath, { maxEntries: sizes });
  try {
    let frame: Buffer = Buffer.alloc(EMPTY_FRAME_LEN);
    if (test.pktgen) {
      const r = await object.program(test.pktgen).testRun({ data: frame, dataOutSize: FRAME_OUT_MAX });
      if (r.retval !== TestStatus.PASS) return { passed: false, checks: 0, message: `PKTGEN returned ${r.retval}, not TEST_PASS: no packet` };
      frame = r.data;
    }
    let setupStatus = 0;
    if (test.setup) {
      const r = await object.program(test.setup).testRun({ data: frame, dataOutSize: FRAME_OUT_MAX });
      setupStatus = r.retval;
      frame = r.data;
    }
    const r = await object.program(test.check).testRun({ data: frame, dataOutSize: FRAME_OUT_MAX, ctx: cbContext(setupStatus) });
    const result = object.map(RESULT_MAP, codec.u32, testResult).get(0);
    if (!result || result.status === 0) return { passed: false, checks: 0, message: `CHECK returned ${r.retval} without recording a result` };
    if (r.retval !== result.status) return { passed: false, checks: result.checks, message: `CHECK returned ${r.retval} but recorded ${result.status}` };
    if (result.status === TestStatus.ERROR) return { passed: false, checks: result.checks, message: 'CHECK could not run (TEST_ERROR)' };
    if (result.status === TestStatus.PASS) {
      // A test that asserts nothing proves nothing.
      return result.checks > 0 ? { passed: true, checks: result.checks, message: '' } : { passed: false, checks: 0, message: 'CHECK passed without one assertion' };
    }
    const nul = result.expr.indexOf(0);
    const expr = Buffer.from(result.expr.subarray(0, nul < 0 ? result.expr.length : nul)).toString('utf8');
    const values = result.hasValues ? ` (got ${BigInt.asIntN(64, result.got)}, want ${BigInt.asIntN(64, result.want)})` : '';
    return { passed: false, checks: result.checks, message: `line ${result.line}${quoteLine(objectPath, result.line)}: ${expr}${values}` };
  } finally {
    object.close();
  }
}
