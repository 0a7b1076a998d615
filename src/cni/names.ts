import { CniError, CniErrorCode } from './errors.js';

/** Linux IFNAMSIZ is 16 including the terminating NUL. */
export const MAX_IFNAME_LENGTH = 15;

// The same character class libcni accepts for container IDs and network names.
const ID_PATTERN = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;

export function validateContainerId(id: string): void {
  if (id === '') throw new CniError(CniErrorCode.UnknownContainer, 'missing containerID');
  if (!ID_PATTERN.test(id)) {
    throw new CniError(CniErrorCode.InvalidEnvironmentVariables, 'invalid characters in containerID', id);
  }
}

export function validateNetworkName(name: string): void {
  if (name === '') throw new CniError(CniErrorCode.InvalidNetworkConfig, 'missing network name');
  if (!ID_PATTERN.test(name)) {
    throw new CniError(CniErrorCode.InvalidNetworkConfig, 'invalid characters found in network name', name);
  }
}

export function validateInterfaceName(ifName: string): void {
  const bad = (msg: string): never => {
    throw new CniError(CniErrorCode.InvalidEnvironmentVariables, msg, ifName);
  };
  if (ifName === '') bad('interface name is empty');
  // The kernel's limit is in bytes, not characters.
  if (Buffer.byteLength(ifName, 'utf8') > MAX_IFNAME_LENGTH) bad('interface name is too long');
  if (ifName === '.' || ifName === '..') bad('interface name is . or ..');
  // '/' and ':' would escape sysfs paths and alias syntax; whitespace breaks iproute2.
  if (/[/:\s\u0085]/.test(ifName)) bad('interface name contains / or : or whitespace characters');
}

/** An absolute path without NUL or `..` segments (netns paths, socket paths, dirs). */
export function validateAbsolutePath(path: string, what: string, code: number = CniErrorCode.InvalidEnvironmentVariables): void {
  if (!path.startsWith('/') || path.includes('\0') || path.split('/').includes('..')) {
    throw new CniError(code, `invalid ${what}: must be an absolute path without '..'`, path);
  }
}
