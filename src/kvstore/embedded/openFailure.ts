import { statSync } from 'node:fs';
import { CorruptStoreError } from '../errors.js';

/** SQLite result codes (better-sqlite3's `code`) that mean the file at the path is no usable database. */
const NOT_A_DATABASE = new Set(['SQLITE_NOTADB', 'SQLITE_CORRUPT', 'SQLITE_CANTOPEN', 'SQLITE_CANTOPEN_ISDIR']);

const FIX = 'move it aside (with its -wal and -shm files) to start with an empty store — restored endpoints then re-claim their addresses — or restore it from a backup';

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    // Missing or unreadable: not a directory, and SQLite's own code says the rest.
    return false;
  }
}

/**
 * The one-line diagnosis for a store SQLite could not open, with the fix, or
 * undefined when the failure is something else (then SQLite's error stands).
 * Without it the agent exits on every start with only "file is not a
 * database" or "unable to open database file", which names neither the file
 * nor what to do.
 */
export function diagnoseOpenFailure(path: string, err: unknown): CorruptStoreError | undefined {
  const code = (err as { code?: unknown }).code;
  const dir = isDirectory(path);
  if (!dir && (typeof code !== 'string' || !NOT_A_DATABASE.has(code) && !code.startsWith('SQLITE_CORRUPT'))) return undefined;
  if (dir) return new CorruptStoreError(path, `embedded kvstore at ${path} is a directory, not a SQLite database: ${FIX}`, err);
  const sqlite = err instanceof Error ? err.message : String(err);
  if (code === 'SQLITE_CANTOPEN') return new CorruptStoreError(path, `embedded kvstore at ${path} cannot be opened (SQLite: ${sqlite}); if it is not a SQLite database: ${FIX}`, err);
  return new CorruptStoreError(path, `embedded kvstore at ${path} is not a SQLite database, or is damaged (SQLite: ${sqlite}): ${FIX}`, err);
}
