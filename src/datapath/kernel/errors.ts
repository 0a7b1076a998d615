import { constants } from 'node:os';
import { CodedError, type CodedErrorJson } from '../../errors/codedError.js';

/** A symbolic errno name as errno(3) spells it, or "EUNKNOWN" for a number the platform has no name for. */
export type ErrnoName = keyof typeof constants.errno | 'EUNKNOWN';

/**
 * The kernel layer's one error type: a failed netlink request or bpf() call,
 * with the errno the kernel returned, its symbolic name as the `code` (the
 * code table is errno's) and the operation that failed (for example
 * "RTM_NEWLINK lxc1234" or "BPF_MAP_CREATE tdl_ct"). Callers branch on
 * `code` (or `errno`), never on the message.
 */
export class KernelError extends CodedError<ErrnoName> {
  /** Positive errno value, as in errno(3). */
  readonly errno: number;
  /** What was asked of the kernel, with the object it concerned. */
  readonly operation: string;
  /** The kernel's own explanation (netlink extended ack), when it gave one. */
  readonly kernelMessage?: string;

  constructor(errno: number, operation: string, kernelMessage?: string, options?: { cause?: unknown }) {
    const code = errnoName(errno);
    const detail = kernelMessage !== undefined && kernelMessage !== '' ? `: ${kernelMessage}` : '';
    super(code, `${operation}: ${code} (${describeErrno(errno)})${detail}`, options);
    this.errno = errno;
    this.operation = operation;
    if (kernelMessage !== undefined && kernelMessage !== '') this.kernelMessage = kernelMessage;
  }

  protected override toJSONAt(depth: number): CodedErrorJson<ErrnoName> & { errno: number; operation: string; kernelMessage?: string } {
    return {
      ...super.toJSONAt(depth),
      errno: this.errno,
      operation: this.operation,
      ...(this.kernelMessage !== undefined ? { kernelMessage: this.kernelMessage } : {}),
    };
  }
}

// Aliases share a number; the kernel's own headers spell these two this way.
const PREFERRED_ALIASES = new Set(['EAGAIN', 'EOPNOTSUPP']);
const namesByNumber = new Map<number, ErrnoName>();
for (const [name, value] of Object.entries(constants.errno) as Array<[ErrnoName, number]>) {
  if (!namesByNumber.has(value) || PREFERRED_ALIASES.has(name)) namesByNumber.set(value, name);
}

/** The symbolic name of an errno value ("EUNKNOWN" when the platform has none). */
export function errnoName(errno: number): ErrnoName {
  return namesByNumber.get(errno) ?? 'EUNKNOWN';
}

/** The errno value of a symbolic name, e.g. errnoNumber('ENODEV') === 19. */
export function errnoNumber(code: keyof typeof constants.errno): number {
  return constants.errno[code];
}

const descriptions: Record<string, string> = {
  EPERM: 'operation not permitted',
  ENOENT: 'no such file or directory',
  ESRCH: 'no such process',
  EINTR: 'interrupted system call',
  EIO: 'input/output error',
  E2BIG: 'argument list too long',
  EBADF: 'bad file descriptor',
  EAGAIN: 'resource temporarily unavailable',
  ENOMEM: 'cannot allocate memory',
  EACCES: 'permission denied',
  EFAULT: 'bad address',
  EBUSY: 'device or resource busy',
  EEXIST: 'file exists',
  ENODEV: 'no such device',
  ENOTDIR: 'not a directory',
  EINVAL: 'invalid argument',
  ENOSPC: 'no space left on device',
  ERANGE: 'numerical result out of range',
  ENAMETOOLONG: 'file name too long',
  ENOSYS: 'function not implemented',
  ENOTSUP: 'operation not supported',
  EOPNOTSUPP: 'operation not supported',
  EAFNOSUPPORT: 'address family not supported by protocol',
  EADDRINUSE: 'address already in use',
  EADDRNOTAVAIL: 'cannot assign requested address',
  ENETDOWN: 'network is down',
  ENETUNREACH: 'network is unreachable',
  ENOBUFS: 'no buffer space available',
  ETIMEDOUT: 'timed out',
  EPROTONOSUPPORT: 'protocol not supported',
  ENOTEMPTY: 'directory not empty',
  ELOOP: 'too many levels of symbolic links',
  ENOMSG: 'no message of desired type',
  ENOTCONN: 'not connected',
  EMSGSIZE: 'message too long',
};

function describeErrno(errno: number): string {
  return descriptions[errnoName(errno)] ?? `errno ${errno}`;
}

/** What the native addon attaches to the errors it throws or rejects with. */
interface AddonErrorShape {
  errno: number;
  code?: string;
  syscall?: string;
}

function isAddonError(err: unknown): err is Error & AddonErrorShape {
  return err instanceof Error && typeof (err as Partial<AddonErrorShape>).errno === 'number';
}

/**
 * Turns an error thrown by the native addon (an Error carrying `errno`,
 * `code` and `syscall`) into a KernelError naming `operation`. Node's own
 * system errors (fs, net) carry a negative `errno`; both signs are accepted.
 * Anything else (a TypeError for a bad argument, a bug) is returned as it
 * is: it is not the kernel's answer and must not be mistaken for one.
 */
export function toKernelError(err: unknown, operation?: string): unknown {
  if (err instanceof KernelError) return err;
  if (!isAddonError(err)) return err;
  const errno = Math.abs(err.errno);
  const op = operation ?? err.syscall ?? 'kernel call';
  return new KernelError(errno, op, undefined, { cause: err });
}

/** Whether `err` is a KernelError with one of the given codes. */
export function isKernelError(err: unknown, ...codes: ErrnoName[]): err is KernelError {
  return err instanceof KernelError && (codes.length === 0 || codes.includes(err.code));
}
