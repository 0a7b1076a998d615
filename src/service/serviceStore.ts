/**
 * Services persisted under the agent's state dir in one SQLite database
 * (`<dir>/services.db`, write-ahead log), one row per service ID. A batch of
 * changes is one transaction: 10,000 services are one write, not 10,000
 * files, and a crash leaves all of a batch or none of it. A record carries
 * the spec with its defaults, the backend IDs (so conntrack entries pinned
 * to them stay valid across an agent restart) and which backends were local
 * when it was written (what the restored entries use until endpoints are
 * back), and for a NodePort on :: the ID of its frontend on each node address.
 *
 * Every row is checked when it is loaded: the database is a door like any
 * file in the state dir (edited while the agent was down). A row that fails
 * the check moves to the `quarantine` table with the reason. An older agent
 * kept one `<id>.json` file per service: those are taken into the database at
 * the first load (checked like rows) and their files removed.
 */
import Database from 'better-sqlite3';
import { chmodSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { MAX_SERVICE_ID } from '../datapath/limits.js';

export const SERVICE_DB_FILE = 'services.db';
/** Where an older agent's record files that could not be read were moved (they stay there). */
export const SERVICE_QUARANTINE_DIR = '.quarantine';
export const SERVICE_RECORD_VERSION = 1;

/** A record as an agent (this one or an older one) wrote it; checked on every load, the spec again by the manager. */
const StoredServiceSchema = z.object({
  version: z.literal(SERVICE_RECORD_VERSION, { error: 'unknown record version' }),
  id: z.number().int(),
  /** The spec as the API takes it, defaults filled in. */
  spec: z.unknown(),
  /** Backend key (`ip:port/PROTO`) → backend ID. */
  backendIds: z.record(z.string(), z.number().int().nonnegative()),
  /** Backend keys that were this node's when the record was written. */
  local: z.array(z.string()),
  /** A NodePort on ::: its frontend per node IPv6 address and that frontend's ID (absent for any other service). */
  frontends: z.array(z.object({ ip: z.string(), id: z.number().int().min(1).max(MAX_SERVICE_ID) })).optional(),
});

export type StoredService = z.infer<typeof StoredServiceSchema>;

export interface LoadedServices {
  records: StoredService[];
  /** Rows (or an older agent's files) that could not be used, moved to quarantine. */
  problems: Array<{ file: string; error: string }>;
}

/** The changes of one batch: records written whole, IDs removed. */
export interface ServiceStoreChanges {
  save?: readonly StoredService[];
  remove?: readonly number[];
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS services (id INTEGER PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS quarantine (seq INTEGER PRIMARY KEY AUTOINCREMENT, service_id INTEGER, record TEXT NOT NULL, error TEXT NOT NULL, moved_at TEXT NOT NULL);
`;

/** One row's record checked, or why it cannot be used. */
function parseRecord(id: number, text: string, holder: string): { record: StoredService } | { error: string } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    return { error: `not JSON: ${(err as Error).message}` };
  }
  const parsed = StoredServiceSchema.safeParse(json, { reportInput: true });
  if (!parsed.success) return { error: parsed.error.issues.map((i) => `${i.path.join('.') || 'record'} ${JSON.stringify(i.input)}: ${i.message}`).join('; ') };
  if (parsed.data.id !== id) return { error: `record of service ${JSON.stringify(parsed.data.id)} in the ${holder} of service ${id}` };
  return { record: parsed.data };
}

interface Statements {
  put: Database.Statement;
  del: Database.Statement;
  all: Database.Statement;
  get: Database.Statement;
  quarantine: Database.Statement;
}

export class ServiceStore {
  #db: Database.Database | undefined;
  #statements: Statements | undefined;

  constructor(readonly dir: string) {}

  get path(): string {
    return join(this.dir, SERVICE_DB_FILE);
  }

  /** The database, opened (and made, 0600 in a 0700 directory) on first use. */
  #open(): Statements {
    if (this.#statements) return this.#statements;
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const db = new Database(this.path);
    try {
      // The journal files SQLite makes take the database file's mode.
      chmodSync(this.path, 0o600);
      db.pragma('journal_mode = WAL');
      // An answered write is on disk: the API says a service is persisted once its transaction committed.
      db.pragma('synchronous = FULL');
      db.exec(SCHEMA);
    } catch (err) {
      db.close();
      throw new Error(`service store ${this.path} cannot be opened (SQLite: ${(err as Error).message}); move it aside (with its -wal and -shm files) to start without services, or restore it from a backup`, { cause: err });
    }
    this.#db = db;
    this.#statements = {
      put: db.prepare('INSERT INTO services (id, record) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET record = excluded.record'),
      del: db.prepare('DELETE FROM services WHERE id = ?'),
      all: db.prepare('SELECT id, record FROM services ORDER BY id'),
      get: db.prepare('SELECT record FROM services WHERE id = ?'),
      quarantine: db.prepare('INSERT INTO quarantine (service_id, record, error, moved_at) VALUES (?, ?, ?, ?)'),
    };
    return this.#statements;
  }

  /** Writes every record and removes every ID of `changes` in one transaction: all of it lands, or none. */
  async commit(changes: ServiceStoreChanges): Promise<void> {
    const st = this.#open();
    this.#db!.transaction(() => {
      for (const r of changes.save ?? []) st.put.run(r.id, JSON.stringify(r));
      for (const id of changes.remove ?? []) st.del.run(id);
    })();
  }

  save(record: StoredService): Promise<void> {
    return this.commit({ save: [record] });
  }

  remove(id: number): Promise<void> {
    return this.commit({ remove: [id] });
  }

  /** Every usable record, by ID; rows that fail the check go to quarantine. An older agent's record files are taken in first. */
  async loadAll(): Promise<LoadedServices> {
    const st = this.#open();
    const out: LoadedServices = { records: [], problems: [] };
    this.#importRecordFiles(out);
    const bad: Array<{ id: number; text: string; error: string }> = [];
    for (const row of st.all.all() as Array<{ id: number; record: string }>) {
      const r = parseRecord(row.id, row.record, 'row');
      if ('record' in r) out.records.push(r.record);
      else bad.push({ id: row.id, text: row.record, error: r.error });
    }
    if (bad.length > 0) {
      const at = new Date().toISOString();
      this.#db!.transaction(() => {
        for (const b of bad) {
          st.quarantine.run(b.id, b.text, b.error, at);
          st.del.run(b.id);
        }
      })();
      for (const b of bad) out.problems.push({ file: `${this.path} (service ${b.id}; moved to its quarantine table)`, error: b.error });
    }
    return out;
  }

  /**
   * The record text stored for `id` as it is, unchecked (undefined: none).
   * For tests and repairs: what someone editing the database sees.
   */
  rawRecord(id: number): string | undefined {
    return (this.#open().get.get(id) as { record: string } | undefined)?.record;
  }

  /** Stores `text` as the record of `id`, unchecked: what someone editing the database while the agent is down can do (tests). */
  putRawRecord(id: number, text: string): void {
    this.#open().put.run(id, text);
  }

  /** Rows moved aside, oldest first. */
  quarantined(): Array<{ serviceId: number; error: string }> {
    this.#open();
    return (this.#db!.prepare('SELECT service_id AS serviceId, error FROM quarantine ORDER BY seq').all() as Array<{ serviceId: number; error: string }>).map((r) => ({ ...r }));
  }

  close(): void {
    this.#db?.close();
    this.#db = undefined;
    this.#statements = undefined;
  }

  /**
   * An older agent's `<id>.json` files: each usable one becomes a row (in one
   * transaction, then its file goes); one that is not usable is moved to
   * `.quarantine` as that agent did; leftovers of its interrupted writes go.
   */
  #importRecordFiles(out: LoadedServices): void {
    const names = readdirSync(this.dir).filter((n) => /^\d+\.json(\.tmp)?$/.test(n));
    if (names.length === 0) return;
    const taken: Array<{ file: string; record: StoredService }> = [];
    for (const name of names) {
      const file = join(this.dir, name);
      if (name.endsWith('.tmp')) {
        rmSync(file, { force: true });
        continue;
      }
      const r = parseRecord(parseInt(name, 10), readFileSync(file, 'utf8'), 'file');
      if ('record' in r) {
        taken.push({ file, record: r.record });
        continue;
      }
      const { error } = r;
      try {
        mkdirSync(join(this.dir, SERVICE_QUARANTINE_DIR), { recursive: true, mode: 0o700 });
        renameSync(file, join(this.dir, SERVICE_QUARANTINE_DIR, `${name}-${new Date().toISOString().replace(/[:.]/g, '-')}`));
        out.problems.push({ file, error });
      } catch (moveErr) {
        out.problems.push({ file, error: `${error}; moving it aside failed: ${(moveErr as Error).message}` });
      }
    }
    const st = this.#statements!;
    this.#db!.transaction(() => {
      for (const t of taken) st.put.run(t.record.id, JSON.stringify(t.record));
    })();
    for (const t of taken) rmSync(t.file, { force: true });
  }
}
