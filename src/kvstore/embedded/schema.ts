import type { Database } from 'better-sqlite3';

/**
 * The embedded store's tables. `kv` holds the current value of every key, so
 * reads are one index lookup; `log` holds one row per change (the MVCC
 * history) so a watch can replay from any revision not yet compacted; `meta`
 * holds the counters that must move atomically with the data.
 *
 * Keys are TEXT with SQLite's default BINARY collation: UTF-8 bytes compared
 * with memcmp, which is etcd's byte order, so prefix ranges match etcd's.
 */
const SCHEMA_VERSION = 1;

const DDL = `
CREATE TABLE IF NOT EXISTS meta (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS kv (
  key        TEXT PRIMARY KEY,
  value      TEXT NOT NULL,
  create_rev INTEGER NOT NULL,
  mod_rev    INTEGER NOT NULL,
  version    INTEGER NOT NULL,
  lease      TEXT NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS kv_by_lease ON kv (lease) WHERE lease <> '0';

CREATE TABLE IF NOT EXISTS log (
  seq        INTEGER PRIMARY KEY,
  rev        INTEGER NOT NULL,
  type       TEXT NOT NULL CHECK (type IN ('put', 'delete')),
  key        TEXT NOT NULL,
  value      TEXT NOT NULL,
  create_rev INTEGER NOT NULL,
  version    INTEGER NOT NULL,
  lease      TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS log_by_rev ON log (rev);

CREATE TABLE IF NOT EXISTS leases (
  id          TEXT PRIMARY KEY,
  ttl         INTEGER NOT NULL,
  deadline_ms INTEGER NOT NULL
) WITHOUT ROWID;
`;

export type MetaName = 'schema_version' | 'revision' | 'compact_revision' | 'next_lease';

/** Creates the tables on first open and refuses a store written by a newer tendril. */
export function migrate(db: Database): void {
  db.exec(DDL);
  const row = db.prepare<[], { value: number }>(`SELECT value FROM meta WHERE name = 'schema_version'`).get();
  if (row === undefined) {
    const init = db.prepare(`INSERT INTO meta (name, value) VALUES (?, ?)`);
    db.transaction(() => {
      init.run('schema_version', SCHEMA_VERSION);
      // etcd starts a fresh cluster at revision 1; so do we, so "0" can mean "missing".
      init.run('revision', 1);
      init.run('compact_revision', 0);
      init.run('next_lease', 1);
    })();
    return;
  }
  if (row.value > SCHEMA_VERSION) {
    throw new Error(`embedded store schema version ${row.value} is newer than this tendril understands (${SCHEMA_VERSION})`);
  }
}
