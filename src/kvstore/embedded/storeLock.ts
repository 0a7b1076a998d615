import Database from 'better-sqlite3';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { LockedError } from '../errors.js';

export type Synchronous = 'full' | 'normal';
export type JournalMode = 'wal' | 'delete';

export interface OpenOptions {
  path: string;
  synchronous: Synchronous;
  journal: JournalMode;
}

export interface LockedDatabase {
  db: Database.Database;
  /** Removes the pid note; the lock itself goes with the database handle. */
  release(): void;
}

/**
 * Opens the store and takes the one-writer lock.
 *
 * The lock is SQLite's own: locking_mode=EXCLUSIVE plus an immediate
 * `BEGIN EXCLUSIVE` makes this connection hold an exclusive POSIX lock on the
 * database file until it closes. The kernel drops that lock when the process
 * dies however it dies, so a crashed agent never leaves a stale lock behind,
 * and there is no pid-liveness race to get wrong. A `<db>.pid` file next to
 * the store only serves the error message ("in use by pid N"); it may be stale
 * and is never trusted for exclusion.
 */
export function openLocked(options: OpenOptions): LockedDatabase {
  mkdirSync(dirname(options.path), { recursive: true, mode: 0o700 });
  // timeout 0: a second opener must fail at once with SQLITE_BUSY, not wait.
  const db = new Database(options.path, { timeout: 0 });
  try {
    db.pragma('locking_mode = EXCLUSIVE');
    db.pragma(`journal_mode = ${options.journal.toUpperCase()}`);
    db.exec('BEGIN EXCLUSIVE; COMMIT');
    db.pragma(`synchronous = ${options.synchronous.toUpperCase()}`);
  } catch (err) {
    db.close();
    if (isBusy(err)) throw new LockedError(options.path, readHolderPid(options.path));
    throw err;
  }
  const pidPath = `${options.path}.pid`;
  writeFileSync(pidPath, `${process.pid}\n`, { mode: 0o600 });
  return {
    db,
    release: () => rmSync(pidPath, { force: true }),
  };
}

function isBusy(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED';
}

function readHolderPid(path: string): number | undefined {
  let text: string;
  try {
    text = readFileSync(`${path}.pid`, 'utf8');
  } catch (err) {
    // The note is advisory: a missing one only makes the message less specific.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
}
