import { copyFile, mkdir, readdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { run, runOk } from '../run.js';

/** Debian's busybox-static: one statically linked binary, no shared libraries to copy. */
export const BUSYBOX_STATIC = '/bin/busybox';

/** The page the busybox httpd in a test container serves from /www. */
export const BUSYBOX_PAGE = 'hello from tdl busybox\n';

/**
 * Builds a container root filesystem offline from busybox-static: /bin/busybox
 * and a symlink per applet, empty mount points, /etc/passwd and /www/index.html.
 * Fails loudly when busybox-static is missing (`make apt-deps` installs it).
 */
export async function buildBusyboxRootfs(dir: string): Promise<void> {
  const list = await run([BUSYBOX_STATIC, '--list']);
  if (list.code !== 0) throw new Error(`${BUSYBOX_STATIC} is missing or broken (install busybox-static: make apt-deps): ${list.stderr.trim()}`);
  for (const d of ['bin', 'etc', 'tmp', 'proc', 'sys', 'dev', 'run', 'www']) await mkdir(join(dir, d), { recursive: true });
  await copyFile(BUSYBOX_STATIC, join(dir, 'bin', 'busybox'));
  const present = new Set(await readdir(join(dir, 'bin')));
  for (const applet of list.stdout.split('\n').map((s) => s.trim())) {
    if (applet && !present.has(applet)) await symlink('busybox', join(dir, 'bin', applet));
  }
  await writeFile(join(dir, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
  await writeFile(join(dir, 'etc', 'group'), 'root:x:0:\n');
  await writeFile(join(dir, 'www', 'index.html'), BUSYBOX_PAGE);
}

/** The rootfs of buildBusyboxRootfs as a tarball (for `podman import` or an OCI layer). */
export async function buildBusyboxTarball(rootfsDir: string, tarball: string): Promise<void> {
  await runOk(['tar', '--numeric-owner', '-C', rootfsDir, '-cf', tarball, '.']);
}
