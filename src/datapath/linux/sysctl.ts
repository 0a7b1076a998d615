import { readFile, writeFile } from 'node:fs/promises';
import { validateInterfaceName } from '../../cni/index.js';
import { DatapathError } from '../types.js';

// Only the sysctls tendril sets; the interface part is validated separately.
const SYSCTL_PATTERN = /^net\/ipv[46]\/(conf\/[^/]+\/[a-z_]+|ip_forward)$|^net\/ipv6\/conf\/[^/]+\/[a-z_]+$/;

/** Writes a sysctl of the calling process's network namespace through /proc/sys. */
export async function setSysctl(name: string, value: string): Promise<void> {
  if (!SYSCTL_PATTERN.test(name)) throw new DatapathError('failed', `refusing to set unexpected sysctl ${name}`);
  await writeFile(`/proc/sys/${name}`, value).catch((err: NodeJS.ErrnoException) => {
    throw new DatapathError(err.code === 'ENOENT' ? 'not-found' : 'failed', `sysctl ${name}=${value}: ${err.message}`);
  });
}

export async function getSysctl(name: string): Promise<string> {
  if (!SYSCTL_PATTERN.test(name)) throw new DatapathError('failed', `refusing to read unexpected sysctl ${name}`);
  const text = await readFile(`/proc/sys/${name}`, 'utf8').catch((err: NodeJS.ErrnoException) => {
    throw new DatapathError(err.code === 'ENOENT' ? 'not-found' : 'failed', `sysctl ${name}: ${err.message}`);
  });
  return text.trim();
}

export function interfaceSysctl(family: 4 | 6, ifName: string, key: string): string {
  validateInterfaceName(ifName);
  return `net/ipv${family}/conf/${ifName}/${key}`;
}
