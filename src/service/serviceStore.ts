/**
 * Services persisted under the agent's state dir, one file per service ID
 * (`<dir>/<id>.json`), written through a rename so a crash leaves the old or
 * the new record, never half of one. A record carries the spec with its
 * defaults, the backend IDs (so conntrack entries pinned to them stay valid
 * across an agent restart) and which backends were local when it was
 * written (what the restored entries use until endpoints are back), and
 * for a NodePort on :: the ID of its frontend on each node address.
 */
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { MAX_SERVICE_ID } from '../datapath/limits.js';

const TMP_SUFFIX = '.tmp';
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
  /** Files that could not be read, moved to `.quarantine` (or left where they are when that failed too). */
  problems: Array<{ file: string; error: string }>;
}

export class ServiceStore {
  constructor(readonly dir: string) {}

  #path(id: number): string {
    return join(this.dir, `${id}.json`);
  }

  async save(record: StoredService): Promise<void> {
    const tmp = `${this.#path(record.id)}${TMP_SUFFIX}`;
    const text = JSON.stringify(record);
    try {
      await writeFile(tmp, text, { mode: 0o600 });
    } catch (err) {
      // The directory is made on the first write (and again if someone removed it), not before every one: 10,000 services are 10,000 writes.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await writeFile(tmp, text, { mode: 0o600 });
    }
    await rename(tmp, this.#path(record.id));
  }

  async remove(id: number): Promise<void> {
    await rm(this.#path(id), { force: true });
  }

  /** Every committed record, by ID; leftovers of interrupted writes are removed. */
  async loadAll(): Promise<LoadedServices> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const out: LoadedServices = { records: [], problems: [] };
    const names = (await readdir(this.dir)).sort((a, b) => parseInt(a, 10) - parseInt(b, 10));
    for (const name of names) {
      const file = join(this.dir, name);
      if (name.endsWith(TMP_SUFFIX)) {
        await rm(file, { force: true });
        continue;
      }
      const m = /^(\d+)\.json$/.exec(name);
      if (!m) continue;
      try {
        const parsed = StoredServiceSchema.safeParse(JSON.parse(await readFile(file, 'utf8')), { reportInput: true });
        if (!parsed.success) throw new Error(parsed.error.issues.map((i) => `${i.path.join('.') || 'record'} ${JSON.stringify(i.input)}: ${i.message}`).join('; '));
        const rec = parsed.data;
        if (rec.id !== Number(m[1])) throw new Error(`record of service ${JSON.stringify(rec.id)} in the file of service ${m[1]}`);
        out.records.push(rec);
      } catch (err) {
        const error = (err as Error).message;
        try {
          await mkdir(join(this.dir, SERVICE_QUARANTINE_DIR), { recursive: true, mode: 0o700 });
          await rename(file, join(this.dir, SERVICE_QUARANTINE_DIR, `${name}-${new Date().toISOString().replace(/[:.]/g, '-')}`));
        } catch (moveErr) {
          out.problems.push({ file, error: `${error}; moving it aside failed: ${(moveErr as Error).message}` });
          continue;
        }
        out.problems.push({ file, error });
      }
    }
    return out;
  }
}
