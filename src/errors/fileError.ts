/**
 * Why a file could not be read, without the path: Node's own message
 * (`ENOENT: no such file or directory, open 'x.yaml'`) names it again after
 * the caller already did.
 */
export function fileErrorReason(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  switch (e.code) {
    case 'ENOENT':
      return 'no such file';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EISDIR':
      return 'is a directory';
    case 'ENOTDIR':
      return 'a part of the path is not a directory';
    default:
      return e.path !== undefined ? (e.message ?? String(err)).replace(`, open '${e.path}'`, '').replace(` '${e.path}'`, '') : (e.message ?? String(err));
  }
}
