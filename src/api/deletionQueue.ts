import { constants } from 'node:fs';
import { type FileHandle, lstat, open, readdir, unlink } from 'node:fs/promises';
import { dirname, join } from 'node:path';

/**
 * DEL requests the plugin could not deliver because the agent was down or
 * did not answer in time (Cilium's deletion fallback). The queue lives
 * beside the agent's socket so the plugin finds it from the same netconf
 * field; the agent drains it on start. tendril-cni writes it
 * (src/plugin/native/queue.c): in this directory (root's, mode 0700), one
 * CniRequest JSON per file named `<ms since epoch>-<8 hex>.json` (root's,
 * mode 0600), written as `.<name>.tmp` and renamed into place, so a reader
 * never sees half a file.
 *
 * The agent runs what it finds here as root, so it trusts only what root
 * wrote: the directory must be a directory (not a symlink) owned by root
 * with mode 0700, each entry a regular file (not a symlink) owned by root
 * and not writable by its group or others. Everything is read through the
 * directory's open descriptor, so the checked directory is the one read.
 */
export function deletionQueueDir(socketPath: string): string {
  return join(dirname(socketPath), 'deletion-queue');
}

/** A queued request the agent may run: `request` is undefined when the file is not JSON. */
export interface QueuedDeletion {
  name: string;
  file: string;
  /** When tendril-cni queued it (from the name), ms since the epoch. */
  queuedAtMs: number;
  request: unknown;
}

/** An entry the agent must not run, and why. */
export interface RefusedDeletion {
  name: string;
  file: string;
  refused: string;
}

export type QueueEntry = QueuedDeletion | RefusedDeletion;

export type OpenedQueue = { kind: 'absent'; dir: string } | { kind: 'refused'; dir: string; reason: string } | { kind: 'open'; dir: string; queue: DeletionQueue };

/** The name tendril-cni gives an entry; the number is its time in ms. */
const ENTRY_NAME = /^(\d{1,15})-[0-9a-f]{8}\.json$/;
/** Far above any request tendril-cni queues (1 MiB of config, escaped, plus the CNI variables). */
const ENTRY_MAX_BYTES = 16 * 1024 * 1024;
const WRITABLE_BY_OTHERS = 0o022;

const mode = (m: number) => (m & 0o7777).toString(8).padStart(4, '0');

export class DeletionQueue {
  private constructor(
    readonly dir: string,
    private readonly handle: FileHandle,
  ) {}

  /** Opens the queue beside `socketPath` if it is one root alone can write. */
  static async open(socketPath: string): Promise<OpenedQueue> {
    const dir = deletionQueueDir(socketPath);
    let handle: FileHandle;
    try {
      handle = await open(dir, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return { kind: 'absent', dir };
      if (code === 'ELOOP' || code === 'ENOTDIR') {
        const st = await lstat(dir);
        return { kind: 'refused', dir, reason: st.isSymbolicLink() ? 'it is a symbolic link' : 'it is not a directory' };
      }
      throw err;
    }
    const st = await handle.stat();
    if (st.uid !== 0 || (st.mode & 0o7777) !== 0o700) {
      await handle.close();
      return { kind: 'refused', dir, reason: `it must be owned by root with mode 0700 (it is uid ${st.uid}, mode ${mode(st.mode)})` };
    }
    return { kind: 'open', dir, queue: new DeletionQueue(dir, handle) };
  }

  /** Entries by name (oldest first); names that are not tendril-cni's are skipped (its own `.tmp` files among them). */
  async list(): Promise<QueueEntry[]> {
    const names = (await readdir(this.at(''))).filter((n) => ENTRY_NAME.test(n)).sort();
    const out: QueueEntry[] = [];
    for (const name of names) out.push(await this.read(name));
    return out;
  }

  async remove(name: string): Promise<void> {
    try {
      await unlink(this.at(name));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }

  close(): Promise<void> {
    return this.handle.close();
  }

  /** A path to `name` inside the directory this queue holds open, whatever happened to its path since. */
  private at(name: string): string {
    return join(`/proc/self/fd/${this.handle.fd}`, name);
  }

  private async read(name: string): Promise<QueueEntry> {
    const file = join(this.dir, name);
    const refuse = (refused: string): RefusedDeletion => ({ name, file, refused });
    // lstat first: a FIFO or device is never opened (opening one may block or act).
    const lst = await lstat(this.at(name));
    if (!lst.isFile()) return refuse('not a regular file');
    let fh: FileHandle;
    try {
      fh = await open(this.at(name), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ELOOP') return refuse('not a regular file');
      throw err;
    }
    try {
      const st = await fh.stat();
      if (!st.isFile() || st.ino !== lst.ino) return refuse('not a regular file');
      if (st.uid !== 0) return refuse(`owned by uid ${st.uid}, not root`);
      if (st.mode & WRITABLE_BY_OTHERS) return refuse(`writable by its group or others (mode ${mode(st.mode)})`);
      if (st.size > ENTRY_MAX_BYTES) return refuse(`larger than ${ENTRY_MAX_BYTES} bytes`);
      const text = await fh.readFile('utf8');
      let request: unknown;
      try {
        request = JSON.parse(text);
      } catch {
        request = undefined; // reported by the caller, which owns the logger
      }
      return { name, file, queuedAtMs: Number(ENTRY_NAME.exec(name)![1]), request };
    } finally {
      await fh.close();
    }
  }
}

export function isRefused(e: QueueEntry): e is RefusedDeletion {
  return 'refused' in e;
}

/** The requests a trusted queue holds, oldest first (tests read the queue with it); throws when the queue is refused. */
export async function listQueuedDeletions(socketPath: string): Promise<QueueEntry[]> {
  const opened = await DeletionQueue.open(socketPath);
  if (opened.kind === 'absent') return [];
  if (opened.kind === 'refused') throw new Error(`deletion queue ${opened.dir} refused: ${opened.reason}`);
  try {
    return await opened.queue.list();
  } finally {
    await opened.queue.close();
  }
}
