/**
 * PolicyLedger: what this node enforced, kept in its state dir — not in the
 * kvstore, whose loss it exists to notice. A kvstore emptied or rolled back
 * (a truncated SQLite file, an old etcd backup) hands back fewer policies
 * than the datapath enforces; imported as they are, every pod they covered
 * would silently lose its policy. So:
 *
 * - `enforced.json` holds the stored policies in force (key, hash, document),
 *   the kvstore revision they stand for, and the policies a loss was found
 *   for and not yet confirmed. Written after every change of the store.
 * - `revision` holds the highest policy revision the node reached, so the
 *   next start counts on from above it (written at every move).
 *
 * At start, after the store's policies are imported: a recorded policy the
 * store no longer has, while the store's revision is below the recorded one
 * (so no later delete explains it), is lost. Lost policies are imported from
 * the ledger and stay in force — restored endpoints regenerate with them, the
 * pinned maps never lose their entries — until an operator re-imports them
 * (they are then stored again) or confirms the loss (`tendril policy
 * confirm-loss`, which deletes them). Meanwhile the agent is degraded, says so
 * in one error line, and counts them (tendril_policy_lost_policies).
 */
import { Serializer } from '../../async/keyedSerializer.js';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import type { Logger } from '../../logging/logger.js';
import type { PolicyFilter } from '../repository.js';
import { formatPolicyName, type Policy, type PolicyName } from '../rule.js';
import { parsePolicyDocuments } from '../ruleParser.js';
import type { PolicyStore, PolicyTarget } from './policyStore.js';

const FORMAT = 1;
const ENFORCED = 'enforced.json';
const REVISION = 'revision';

/** A file in the state dir is input too (edited, truncated): read only through these schemas. */
const LedgerEntrySchema = z.object({ key: z.string(), hash: z.string(), document: z.unknown() });
const LedgerFileSchema = z.object({
  v: z.literal(FORMAT),
  /** The store's revision (its policy marker's) when the file was written. */
  clusterRevision: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  policies: z.array(LedgerEntrySchema),
  /** Keys of `policies` the store lost, kept in force until confirmed. */
  lost: z.array(z.string()),
});
const RevisionSchema = z.coerce.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);

type LedgerEntry = z.infer<typeof LedgerEntrySchema>;
type LedgerFile = z.infer<typeof LedgerFileSchema>;

/** The revision endpoints realize (PolicyRevisions): read, raised at start, followed. */
export interface RevisionCounter {
  readonly revision: number;
  raiseRevision(floor: number): void;
  onRevision(listener: (revision: number) => void): () => void;
}

type Target = PolicyTarget<{ readonly policies: readonly PolicyName[] }, { readonly deleted: readonly PolicyName[]; readonly endpoints?: readonly number[] }>;

export interface LostPolicy {
  key: string;
  name: PolicyName;
  hash: string;
  document: unknown;
}

export class PolicyLedger {
  readonly #dir: string;
  readonly #log: Logger;
  #lost = new Map<string, LostPolicy>();
  readonly #writing = new Serializer();
  /** A ledger write is queued and not begun yet: a change now rides on it. */
  #recordQueued = false;
  #unsubscribe: Array<() => void> = [];
  #stopped = false;

  constructor(stateDir: string, log: Logger) {
    this.#dir = join(stateDir, 'policy');
    this.#log = log;
  }

  /** The policies kept in force although the store lost them (empty once re-imported or confirmed). */
  lost(): LostPolicy[] {
    return [...this.#lost.values()];
  }

  /**
   * Reads what an earlier run recorded. Call before the store starts (its first
   * listing must not overwrite the record it is compared with).
   */
  async load(): Promise<{ file: LedgerFile | undefined; revision: number }> {
    await mkdir(this.#dir, { recursive: true, mode: 0o700 });
    let file: LedgerFile | undefined;
    try {
      const parsed = LedgerFileSchema.safeParse(JSON.parse(await readFile(join(this.#dir, ENFORCED), 'utf8')));
      if (parsed.success) file = parsed.data;
      else this.#log.error({ file: join(this.#dir, ENFORCED) }, 'policy ledger has an unknown layout; a policy loss cannot be told this start');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT') this.#log.error({ err, file: join(this.#dir, ENFORCED) }, 'policy ledger unreadable; a policy loss cannot be told this start');
    }
    let revision = 0;
    try {
      const parsed = RevisionSchema.safeParse(readFileSync(join(this.#dir, REVISION), 'utf8').trim());
      if (parsed.success) revision = parsed.data;
      else this.#log.error({ file: join(this.#dir, REVISION) }, 'policy revision record is no revision; counting on from the engine');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.#log.error({ err }, 'policy revision record unreadable');
    }
    return { file, revision };
  }

  /**
   * After the store's start: compares it with the record, keeps lost policies
   * in force, raises the revision above the recorded one, and from then on
   * records every change.
   */
  async start(recorded: { file: LedgerFile | undefined; revision: number }, store: PolicyStore<{ readonly policies: readonly PolicyName[] }, { readonly deleted: readonly PolicyName[] }>, target: Target, revisions: RevisionCounter): Promise<void> {
    await store.exclusive(() => this.#compare(recorded.file, store, target));
    // Above every revision an earlier run showed: a restart never makes the node look older.
    if (recorded.revision > 0) revisions.raiseRevision(recorded.revision + 1);
    this.#writeRevision(revisions.revision);
    this.#unsubscribe.push(revisions.onRevision((r) => this.#writeRevision(r)));
    this.#unsubscribe.push(store.onChange(() => this.#record(store, target)));
    this.#record(store, target);
    await this.#writing.settled();
  }

  /**
   * Deletes the lost policies from the engine: the operator says the store is
   * right. Runs in the store's queue. Answers what was dropped and the
   * endpoints whose map state changed.
   */
  async confirmLoss(store: PolicyStore<{ readonly policies: readonly PolicyName[] }, { readonly deleted: readonly PolicyName[] }>, target: Target): Promise<{ dropped: PolicyName[]; endpoints: number[] }> {
    const out = await store.exclusive(() => {
      const dropped: PolicyName[] = [];
      const endpoints = new Set<number>();
      for (const lost of this.#lost.values()) {
        const filter: PolicyFilter = { kind: lost.name.kind, namespace: lost.name.namespace, name: lost.name.name };
        // Gone already (a Kubernetes object of that name replaced it, say): nothing to drop.
        if (target.policies(filter).length > 0) {
          const r = target.deletePolicies(filter);
          for (const id of r.endpoints ?? []) endpoints.add(id);
        }
        dropped.push(lost.name);
      }
      this.#lost.clear();
      return { dropped, endpoints: [...endpoints].sort((a, b) => a - b) };
    });
    if (out.dropped.length > 0) this.#log.warn({ policies: out.dropped.map(formatPolicyName) }, `policy loss confirmed: ${out.dropped.length} policies the kvstore had lost are no longer enforced`);
    this.#record(store, target);
    await this.#writing.settled();
    return out;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    for (const u of this.#unsubscribe.splice(0)) u();
    await this.#writing.settled();
  }

  #compare(file: LedgerFile | undefined, store: PolicyStore<{ readonly policies: readonly PolicyName[] }, { readonly deleted: readonly PolicyName[] }>, target: Target): void {
    if (!file) return;
    const stored = new Set(store.storedPolicies().map((p) => p.key));
    // A store at a revision past the record's has seen changes since (another node's deletes): those are no loss.
    const wentBack = store.clusterRevision < file.clusterRevision;
    const lost = file.policies.filter((p) => !stored.has(p.key) && (wentBack || file.lost.includes(p.key)));
    const retained: Policy[] = [];
    for (const entry of lost) {
      let policy: Policy;
      try {
        [policy] = parsePolicyDocuments([entry.document]) as [Policy];
      } catch (err) {
        this.#log.error({ key: entry.key, err }, 'a lost policy recorded in the state dir does not parse; it cannot be kept in force');
        continue;
      }
      retained.push(policy);
      this.#lost.set(entry.key, { key: entry.key, name: policy.name, hash: entry.hash, document: entry.document });
    }
    if (retained.length === 0) return;
    target.upsertPolicies(retained);
    this.#log.error(
      { policies: retained.map((p) => formatPolicyName(p.name)), storeRevision: store.clusterRevision, recordedRevision: file.clusterRevision },
      `the kvstore has lost ${retained.length} of the ${file.policies.length} policies this node enforced (${retained.map((p) => formatPolicyName(p.name)).join(', ')}); they stay in force from the state dir, and the agent is degraded, until they are imported again or the loss is confirmed (tendril policy confirm-loss)`,
    );
  }

  /**
   * Writes the ledger as the engine holds it when the write begins. Changes
   * that come while a write is queued ride on it: an import of 10,000
   * policies is a few writes of the whole ledger, not 10,000 (each of them a
   * JSON text of every policy: gigabytes of garbage, the agent's peak memory).
   */
  #record(store: PolicyStore<{ readonly policies: readonly PolicyName[] }, { readonly deleted: readonly PolicyName[] }>, target: Target): void {
    if (this.#stopped) return;
    // A loss re-imported (the store holds the key again) is over at once, so health says so; only while there is one is the store read here.
    if (this.#lost.size > 0) for (const s of store.storedPolicies()) this.#lost.delete(s.key);
    if (this.#recordQueued) return;
    this.#recordQueued = true;
    void this.#writing
      .run(async () => {
        this.#recordQueued = false;
        const text = this.#ledgerText(store, target);
        const tmp = join(this.#dir, `${ENFORCED}.tmp`);
        await writeFile(tmp, text, { mode: 0o600 });
        await rename(tmp, join(this.#dir, ENFORCED));
      })
      .catch((err: unknown) => this.#log.error({ err }, 'recording the enforced policies in the state dir failed; a later kvstore loss may go unnoticed'));
  }

  /** The ledger as the engine holds it now. */
  #ledgerText(store: PolicyStore<{ readonly policies: readonly PolicyName[] }, { readonly deleted: readonly PolicyName[] }>, target: Target): string {
    const stored = store.storedPolicies();
    const documents = new Map(target.policies().map((p) => [store.key(p.name), p.document]));
    const policies: LedgerEntry[] = [
      ...stored.flatMap((s) => (documents.has(s.key) ? [{ key: s.key, hash: s.hash, document: documents.get(s.key) }] : [])),
      ...[...this.#lost.values()].map((l) => ({ key: l.key, hash: l.hash, document: l.document })),
    ];
    const file: LedgerFile = { v: FORMAT, clusterRevision: store.clusterRevision, policies, lost: [...this.#lost.keys()] };
    return JSON.stringify(file);
  }

  /** Synchronous: a revision shown is on disk before anything else happens (a kill -9 right after keeps it). */
  #writeRevision(revision: number): void {
    if (this.#stopped) return;
    try {
      const tmp = join(this.#dir, `${REVISION}.tmp`);
      writeFileSync(tmp, `${revision}\n`, { mode: 0o600 });
      renameSync(tmp, join(this.#dir, REVISION));
    } catch (err) {
      this.#log.error({ err, revision }, 'recording the policy revision in the state dir failed');
    }
  }
}
