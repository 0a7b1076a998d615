/**
 * A service as the agent's API carries it (Cilium's service model: one
 * frontend, its backends and flags, under a stable ID that is also the
 * datapath's reverse NAT index), and what the service subsystem offers the
 * API routes. Field names are the API's (kebab-case where Cilium's are).
 */
import type { LbBackendState, LbProtocol } from '../datapath/types.js';

export type ServiceType = 'ClusterIP' | 'NodePort' | 'ExternalIPs' | 'LoadBalancer';
export type TrafficPolicy = 'Cluster' | 'Local';
export type LbAlgorithm = 'random' | 'maglev';

export interface FrontendAddress {
  ip: string;
  port: number;
  protocol: LbProtocol;
}

export interface BackendAddress {
  ip: string;
  port: number;
  /** Relative share under Maglev; 0 = no new connections. Default 1. */
  weight?: number;
  /** Default `active`. */
  state?: LbBackendState;
}

export interface ServiceFlags {
  type: ServiceType;
  /** externalTrafficPolicy: `Local` keeps traffic from outside the node on this node's backends (and its source address). Default `Cluster`. */
  trafficPolicy?: TrafficPolicy;
  /**
   * internalTrafficPolicy: `Local` keeps traffic from inside the node (its
   * pods, the node itself) on this node's backends; with none here it is
   * dropped, as Kubernetes does. Default `Cluster`.
   */
  internalTrafficPolicy?: TrafficPolicy;
  /** ClientIP session affinity. Default false. */
  sessionAffinity?: boolean;
  /** Seconds, 1..86400; default 10800 (Kubernetes'). */
  sessionAffinityTimeout?: number;
  /**
   * loadBalancerSourceRanges (a LoadBalancer only): CIDRs of the frontend's
   * family; when given, only sources inside one reach the service, from
   * outside the node and from its pods alike. Default: every source.
   */
  sourceRanges?: string[];
}

/** The body of PUT /service/{id}. */
export interface ServiceSpec {
  /** When present, must equal the path's ID. */
  id?: number;
  'frontend-address': FrontendAddress;
  'backend-addresses': BackendAddress[];
  flags: ServiceFlags;
}

/** A backend as the agent holds it: defaults filled in, with the datapath's backend ID. */
export interface ServiceBackendStatus {
  ip: string;
  port: number;
  weight: number;
  state: LbBackendState;
  /** The datapath's backend ID (shared by every service with this address, port and protocol). */
  id: number;
  /** Whether the address is an endpoint on this node. */
  local: boolean;
}

/** GET /service/{id}: the spec with defaults filled in, and what the datapath holds. */
export interface ServiceStatus {
  id: number;
  'frontend-address': FrontendAddress;
  'backend-addresses': ServiceBackendStatus[];
  flags: Required<ServiceFlags>;
  /** Whether the datapath's maps hold this service as it is now. */
  realized: boolean;
}

/** One change of a batch (PATCH /service): a service written whole under its ID, or one removed. */
export type ServiceChange = { upsert: ServiceSpec & { id: number } } | { delete: number };

/** What one change of a batch did; `failed` carries the error a single call would have thrown. */
export interface ServiceChangeResult {
  id: number;
  op: 'upsert' | 'delete';
  result: 'created' | 'updated' | 'unchanged' | 'deleted' | 'not-found' | 'failed';
  error?: { code: string; message: string };
}

/**
 * What the API routes use. Errors are ServiceError: INVALID (400),
 * NOT_FOUND (404), CONFLICT (409), UNSUPPORTED (409), DATAPATH_FAILED (503).
 */
export interface ServiceApi {
  /** Creates or replaces service `id`; the same spec again changes nothing (`changed` false). */
  upsert(id: number, spec: ServiceSpec): Promise<{ service: ServiceStatus; created: boolean; changed: boolean }>;
  /** Removes service `id`; NOT_FOUND when there is none. */
  delete(id: number): Promise<void>;
  /**
   * Applies changes in order, as that many upserts and deletes would, in
   * one pass: one check of the node's addresses, one write of the records.
   * Each change succeeds or fails on its own (its result says which).
   */
  apply(changes: readonly ServiceChange[]): Promise<ServiceChangeResult[]>;
  get(id: number): ServiceStatus | undefined;
  /** Every service, by ID. */
  list(): ServiceStatus[];
}
