import { mkdir, readdir, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Endpoint, EndpointSchema } from './endpoint.js';

/** Where unreadable records are moved, inside the store's directory (restore never reads it). */
export const QUARANTINE_DIR = '.quarantine';
/** Written beside a quarantined record: why it was moved there, for the operator. */
export const QUARANTINE_REASON = 'reason.txt';

const RECORD = 'endpoint.json';
const TMP_SUFFIX = '.tmp';

export interface RestoreProblem {
  dir: string;
  error: string;
}

/** A record restore could not read, moved aside so its pod is left alone and it is not read again. */
export interface QuarantinedRecord {
  id: number;
  /** Where the record's directory is now. */
  movedTo: string;
  error: string;
  /**
   * The pod's host interface as far as the damaged text still names it
   * (a truncated record usually does); undefined when nothing is legible.
   */
  hostIfName?: string;
  containerId?: string;
}

export interface LoadResult {
  endpoints: Endpoint[];
  quarantined: QuarantinedRecord[];
  /** Records that could be neither read nor moved aside (they stay where they are). */
  problems: RestoreProblem[];
}

export interface QuarantineHolds {
  /** Entries under `.quarantine`. */
  records: number;
  /** Host interfaces those records still name. */
  hostIfNames: string[];
  /** The attachments (container ID, interface name) those records still name: their derived host interfaces are theirs too. */
  attachments: Array<{ containerId: string; ifName: string }>;
  /** Records that name no interface legibly: any pod interface may be one of theirs. */
  illegible: number;
}

/** The text of a quarantined entry (its record, or the entry itself when it was a plain file); empty when unreadable. */
async function readLeftover(entry: string): Promise<string> {
  for (const path of [join(entry, RECORD), entry]) {
    try {
      return await readFile(path, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR' && code !== 'EISDIR') throw err;
    }
  }
  return '';
}

/** A string field of a JSON object as far as damaged text still holds it. */
function legibleField(text: string, field: string): string | undefined {
  const m = new RegExp(`"${field}"\\s*:\\s*"([A-Za-z0-9_.:@-]{1,256})"`).exec(text);
  return m?.[1];
}

/**
 * Endpoints persisted under the state dir, one directory per endpoint ID, so
 * the agent restores them after a restart. Writes go through a rename, so a
 * crash leaves either the old or the new model, never half of one.
 */
export class EndpointStore {
  constructor(readonly dir: string) {}

  private path(id: number): string {
    return join(this.dir, String(id), RECORD);
  }

  async save(ep: Endpoint): Promise<void> {
    await mkdir(join(this.dir, String(ep.id)), { recursive: true, mode: 0o700 });
    const tmp = `${this.path(ep.id)}${TMP_SUFFIX}`;
    await writeFile(tmp, JSON.stringify(ep, null, 2), { mode: 0o600 });
    await rename(tmp, this.path(ep.id));
  }

  async remove(id: number): Promise<void> {
    await rm(join(this.dir, String(id)), { recursive: true, force: true });
  }

  /**
   * Every committed record. What an interrupted write left — a `.tmp` file, a
   * directory with no record — never held a committed state (the record is
   * replaced by a rename) and is removed without a word. A record that cannot
   * be read is moved to `.quarantine/<id>-<time>`, so its pod is not mistaken
   * for one nobody owns and the damage is reported once, not on every start.
   */
  async loadAll(): Promise<LoadResult> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const out: LoadResult = { endpoints: [], quarantined: [], problems: [] };
    for (const name of (await readdir(this.dir)).sort()) {
      if (!/^\d+$/.test(name)) continue;
      const dir = join(this.dir, name);
      if (!(await this.#dropUncommitted(dir))) continue;
      let text: string | undefined;
      try {
        text = await readFile(this.path(Number(name)), 'utf8');
        const ep = EndpointSchema.parse(JSON.parse(text));
        // Two records claiming one ID would make restore register one over the other.
        if (String(ep.id) !== name) throw new Error(`the record in directory ${name} says it is endpoint ${ep.id}`);
        out.endpoints.push(ep);
      } catch (err) {
        const error = (err as Error).message;
        try {
          out.quarantined.push(await this.#quarantine(Number(name), error, text));
        } catch (moveErr) {
          out.problems.push({ dir, error: `${error}; moving it aside failed: ${(moveErr as Error).message}` });
        }
      }
    }
    return out;
  }

  /**
   * What the quarantined records (this start's and earlier ones') still say
   * about their pods: the host interfaces they name, and how many name none.
   * Until an operator removes a record, its pod's interface must not be taken
   * for one nobody owns.
   */
  async quarantineHolds(): Promise<QuarantineHolds> {
    const qdir = join(this.dir, QUARANTINE_DIR);
    let names: string[];
    try {
      names = (await readdir(qdir)).sort();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { records: 0, hostIfNames: [], attachments: [], illegible: 0 };
      throw err;
    }
    const holds: QuarantineHolds = { records: names.length, hostIfNames: [], attachments: [], illegible: 0 };
    for (const name of names) {
      const text = await readLeftover(join(qdir, name));
      const hostIfName = legibleField(text, 'hostIfName');
      const containerId = legibleField(text, 'containerId');
      if (hostIfName) holds.hostIfNames.push(hostIfName);
      else holds.illegible++;
      if (containerId) holds.attachments.push({ containerId, ifName: legibleField(text, 'ifName') ?? 'eth0' });
    }
    return holds;
  }

  /**
   * Moves a record that reads fine but cannot be trusted (it names an
   * interface that is not its attachment's, or an address IPAM gives to
   * another owner) to `.quarantine/<id>-<time>`, with the reason beside it.
   * Restore never reads it again; its pod's interfaces are left alone.
   */
  async quarantine(ep: Endpoint, reason: string): Promise<QuarantinedRecord> {
    const q = await this.#quarantine(ep.id, reason, JSON.stringify(ep));
    await writeFile(join(q.movedTo, QUARANTINE_REASON), `${reason}\n`, { mode: 0o600 });
    return q;
  }

  /** Where the record of endpoint `id` lives (what a log line names). */
  recordPath(id: number): string {
    return this.path(id);
  }

  /** Removes `.tmp` leftovers; false (and the directory gone) when no record remains. */
  async #dropUncommitted(dir: string): Promise<boolean> {
    let entries: string[];
    try {
      entries = await readdir(dir);
    } catch (err) {
      // A plain file with a numeric name is no record directory: read it as one, so it is quarantined.
      if ((err as NodeJS.ErrnoException).code === 'ENOTDIR') return true;
      throw err;
    }
    for (const e of entries) {
      if (e.endsWith(TMP_SUFFIX)) await rm(join(dir, e), { force: true });
    }
    if (entries.some((e) => !e.endsWith(TMP_SUFFIX))) return true;
    await rmdir(dir);
    return false;
  }

  async #quarantine(id: number, error: string, text: string | undefined): Promise<QuarantinedRecord> {
    const qdir = join(this.dir, QUARANTINE_DIR);
    await mkdir(qdir, { recursive: true, mode: 0o700 });
    const movedTo = join(qdir, `${id}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
    await rename(join(this.dir, String(id)), movedTo);
    const hostIfName = text === undefined ? undefined : legibleField(text, 'hostIfName');
    const containerId = text === undefined ? undefined : legibleField(text, 'containerId');
    return { id, movedTo, error, ...(hostIfName ? { hostIfName } : {}), ...(containerId ? { containerId } : {}) };
  }
}
