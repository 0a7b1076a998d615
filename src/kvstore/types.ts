/**
 * The kvstore contract every backend implements. It follows etcd v3's data
 * model so that identity, IPAM and ipcache code means the same thing whether
 * it runs against the embedded store on one node or against an etcd cluster:
 *
 * - one cluster-wide revision counter, bumped once per write request (a
 *   transaction or a prefix delete touching many keys still costs one revision);
 * - per key: createRevision (revision of the put that created the current
 *   incarnation), modRevision (revision of the last change) and version
 *   (number of puts since creation; a delete resets the key);
 * - leases with a TTL; keys attached to a lease vanish when it expires;
 * - watches deliver put/delete events in revision order from any revision that
 *   has not been compacted away.
 *
 * Revisions are JavaScript numbers: 2^53 writes is beyond any deployment.
 * Lease IDs are decimal strings because etcd hands out random 64-bit IDs.
 */

export type BackendKind = 'embedded' | 'etcd';

/** `--kvstore` when none is given: a single node needs nothing else. */
export const DEFAULT_BACKEND: BackendKind = 'embedded';

/** A lease ID as a decimal string; '0' means "no lease". */
export type LeaseId = string;
export const NO_LEASE: LeaseId = '0';

export interface KeyValue {
  key: string;
  value: string;
  createRevision: number;
  modRevision: number;
  version: number;
  lease: LeaseId;
}

export interface PutOptions {
  /** Attach the key to this lease; it is deleted when the lease ends. */
  lease?: LeaseId;
}

export interface PutResult {
  /** The store revision this put created. */
  revision: number;
  kv: KeyValue;
}

export interface DeleteResult {
  /** Store revision after the delete (unchanged when nothing was deleted). */
  revision: number;
  deleted: number;
}

export interface ListResult {
  /** Store revision the listing is consistent with: watch from revision + 1. */
  revision: number;
  kvs: KeyValue[];
}

export type CompareOp = '==' | '!=' | '<' | '>';

/**
 * Compares evaluated against the state before the transaction. As in etcd, a
 * missing key has createRevision = modRevision = version = 0, and any compare
 * on the value of a missing key is false.
 */
export type Compare =
  | { key: string; target: 'value'; op?: CompareOp; value: string }
  | { key: string; target: 'modRevision' | 'createRevision' | 'version'; op?: CompareOp; value: number }
  | { key: string; target: 'exists'; value: boolean };

export type TxnOp =
  | { type: 'put'; key: string; value: string; lease?: LeaseId }
  | { type: 'delete'; key: string }
  | { type: 'deletePrefix'; prefix: string };

export interface TxnRequest {
  compare: Compare[];
  /** Applied when every compare holds. */
  success: TxnOp[];
  /** Applied otherwise; optional. */
  failure?: TxnOp[];
}

export interface TxnResult {
  succeeded: boolean;
  /** Store revision after the transaction. */
  revision: number;
}

export interface Lease {
  id: LeaseId;
  /** Granted TTL in seconds. */
  ttl: number;
}

export interface WatchEvent {
  type: 'put' | 'delete';
  key: string;
  /** New value for put; empty for delete. */
  value: string;
  /** Revision of the change; watch from modRevision + 1 to resume after it. */
  modRevision: number;
  createRevision: number;
  version: number;
  lease: LeaseId;
}

export interface WatchOptions {
  /**
   * Deliver every change with modRevision >= fromRevision. Omitted: only
   * changes after the watch is established.
   */
  fromRevision?: number;
}

export interface WatchListener {
  /** Events in revision order; never repeated, never skipped. */
  onEvents(events: WatchEvent[]): void;
  /**
   * The watch ended for good. A CompactedError means the requested history is
   * gone: list again and watch from the listing's revision + 1.
   */
  onError(err: Error): void;
}

export interface Watch {
  /** Revision the next delivered event will have at least (resume point). */
  readonly nextRevision: number;
  /** Resolves once the watch is registered and its start revision fixed. */
  readonly ready: Promise<void>;
  close(): Promise<void>;
}

export interface Status {
  backend: BackendKind;
  connected: boolean;
  /** Current store revision (0 when not connected). */
  revision: number;
  /** Human-readable detail, e.g. the database path or endpoints. */
  detail: string;
}

export interface Backend {
  readonly kind: BackendKind;
  get(key: string): Promise<KeyValue | undefined>;
  list(prefix: string): Promise<ListResult>;
  put(key: string, value: string, options?: PutOptions): Promise<PutResult>;
  delete(key: string): Promise<DeleteResult>;
  deletePrefix(prefix: string): Promise<DeleteResult>;
  txn(request: TxnRequest): Promise<TxnResult>;
  grantLease(ttlSeconds: number): Promise<Lease>;
  /** Refreshes the lease to its full TTL; returns the TTL. */
  keepAlive(id: LeaseId): Promise<number>;
  /** Ends the lease now and deletes its keys. */
  revokeLease(id: LeaseId): Promise<void>;
  watch(prefix: string, options: WatchOptions, listener: WatchListener): Watch;
  /** Drops history below `revision`; watches from older revisions fail with CompactedError. */
  compact(revision: number): Promise<void>;
  status(): Promise<Status>;
  close(): Promise<void>;
}
