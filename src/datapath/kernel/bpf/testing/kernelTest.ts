import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { KernelError } from '../../errors.js';
import { ensureBpffs, mkdirPinDir } from '../bpffs.js';
import { bytes, lpmKey, lpmPrefix, struct, u32, u64 } from '../codec.js';
import { BPFFS_ROOT } from '../constants.js';

/**
 * The test object src/datapath/kernel/testdata/kernel_test.bpf.c (built by
 * `make native` into build/bpf/testdata) and its C structs as codecs.
 */
const TESTDATA = fileURLToPath(new URL('../../../../../../build/bpf/testdata/', import.meta.url));
export const KERNEL_TEST_OBJECT = join(TESTDATA, 'kernel_test.bpf.o');
export const KERNEL_BAD_OBJECT = join(TESTDATA, 'kernel_bad.bpf.o');

/** struct tdl_counter */
export const counterCodec = struct({ packets: u64, bytes: u64 });
/** struct tdl_event */
export const eventCodec = struct({ saddr: bytes(4), daddr: bytes(4), len: u32, variant: u32 });
/** struct tdl_lpm_key: an IPv4 prefix */
export const lpmKeyCodec = lpmKey(bytes(4));
/** struct tdl_lpm_key read and written as a src/netip prefix. */
export const prefixKeyCodec = lpmPrefix(4);
/** tdl_count is keyed by the IPv4 source address as the packet carries it. */
export const addressKey = bytes(4);

/** Verdict classes in tdl_lpm (TDL_CLASS_* in the C). */
export const CLASS_DENY = 1;

/**
 * A fresh pin directory under /sys/fs/bpf whose name starts with `tdl`
 * (mounting bpffs first when needed). Remove it with removePinDir.
 */
export async function makePinRoot(tag: string): Promise<string> {
  await ensureBpffs();
  const dir = join(BPFFS_ROOT, `tdl-${tag}-${randomBytes(3).toString('hex')}`);
  await mkdirPinDir(dir);
  return dir;
}

/** Asserts that `fn` throws (or rejects with) a KernelError of `code` whose operation matches. */
export async function expectKernelError(fn: () => unknown, code: string, operation: RegExp): Promise<KernelError> {
  try {
    await fn();
  } catch (err) {
    assert.ok(err instanceof KernelError, `expected a KernelError, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    assert.equal(typeof err.errno, 'number');
    assert.ok(err.errno > 0);
    assert.match(err.operation, operation);
    return err;
  }
  assert.fail(`expected a KernelError ${code}`);
}
