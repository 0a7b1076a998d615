import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { KernelError, errnoNumber, toKernelError } from '../errors.js';
import { BPFFS_ROOT } from './constants.js';
import { bpfSync, nativeBpf } from './native.js';

/**
 * Pins live on a bpf filesystem; /sys/fs/bpf is its usual mount point but a
 * fresh machine or container may not have it mounted. Mounting is a mount(2)
 * from the addon, not a `mount` process.
 */
export async function ensureBpffs(root: string = BPFFS_ROOT): Promise<'present' | 'mounted'> {
  const bpf = nativeBpf();
  if (bpfSync(() => bpf.isBpffs(root))) return 'present';
  try {
    await mkdir(root, { recursive: true, mode: 0o755 });
  } catch (err) {
    throw toKernelError(err, `mkdir ${root}`);
  }
  bpfSync(() => bpf.mountBpffs(root));
  return 'mounted';
}

/** Whether a path is on a bpf filesystem (false when it does not exist). */
export function isOnBpffs(path: string): boolean {
  return bpfSync(() => nativeBpf().isBpffs(path));
}

/**
 * Creates a directory for pins (and its parents), 0700: pinned maps hold the
 * datapath's state and only the agent should open them.
 */
export async function mkdirPinDir(path: string): Promise<void> {
  // Checked on the nearest existing ancestor, so nothing is created elsewhere.
  let existing = resolve(path);
  while (!existsSync(existing)) existing = dirname(existing);
  if (!isOnBpffs(existing)) throw new KernelError(errnoNumber('EXDEV'), `mkdir ${path}`, 'not on a bpf filesystem; pins cannot live there');
  try {
    await mkdir(path, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw toKernelError(err, `mkdir ${path}`);
  }
}

/** Removes a pin directory and every pin under it (pinned objects without other users are freed). */
export async function removePinDir(path: string): Promise<void> {
  if (!existsSync(path)) return;
  if (!isOnBpffs(path)) {
    throw new KernelError(errnoNumber('EXDEV'), `rm ${path}`, 'not on a bpf filesystem; refusing to remove it');
  }
  try {
    await rm(path, { recursive: true, force: true });
  } catch (err) {
    throw toKernelError(err, `rm ${path}`);
  }
}

/** Removes one pin (the object lives on while fds or links hold it). */
export function unpin(path: string): void {
  bpfSync(() => nativeBpf().unpin(path));
}
