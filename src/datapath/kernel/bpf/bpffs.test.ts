import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { requireRoot } from '../../../../test/support/root.js';
import { runOk } from '../../../../test/support/run.js';
import { ensureBpffs, isOnBpffs, mkdirPinDir, removePinDir } from './bpffs.js';
import { BPFFS_ROOT } from './constants.js';
import { expectKernelError } from './testing/kernelTest.js';

requireRoot('the bpffs tests');

describe('bpffs', () => {
  const mounted: string[] = [];
  const temps: string[] = [];

  after(async () => {
    for (const m of mounted) await runOk(['umount', m]);
    for (const t of temps) await rm(t, { recursive: true, force: true });
  });

  it('finds /sys/fs/bpf mounted, or mounts it', async () => {
    const first = await ensureBpffs();
    assert.ok(first === 'present' || first === 'mounted');
    assert.equal(isOnBpffs(BPFFS_ROOT), true);
    assert.equal(await ensureBpffs(), 'present');
  });

  it('mounts a bpf filesystem with mount(2) where there is none', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tdl-bpffs-'));
    temps.push(dir);
    assert.equal(isOnBpffs(dir), false);
    assert.equal(await ensureBpffs(dir), 'mounted');
    mounted.push(dir);
    assert.equal(isOnBpffs(dir), true);
    await mkdirPinDir(join(dir, 'tdl', 'pins'));
    assert.equal(isOnBpffs(join(dir, 'tdl', 'pins')), true);
  });

  it('refuses pin directories off bpffs without creating anything', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tdl-notbpf-'));
    temps.push(dir);
    const target = join(dir, 'a', 'b');
    const err = await expectKernelError(() => mkdirPinDir(target), 'EXDEV', /^mkdir .*tdl-notbpf-.*\/a\/b$/);
    assert.match(err.message, /not on a bpf filesystem/);
    assert.equal(existsSync(join(dir, 'a')), false);
    await expectKernelError(() => removePinDir(dir), 'EXDEV', /^rm /);
    assert.equal(existsSync(dir), true);
    await removePinDir(join(BPFFS_ROOT, 'tdl-never-created'));
  });
});
