import type { Result100 } from '../cni/types.js';

/** Request and response bodies of the agent API (api/openapi.yaml is the source of truth). */

export type CniVerb = 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS';

/** The CNI versions tendril-cni and the agent speak (results before 0.3.0 cannot carry interfaces). */
export const SUPPORTED_CNI_VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'];

export interface CniRequest {
  command: CniVerb;
  containerId?: string;
  netns?: string;
  ifName?: string;
  args?: string;
  path?: string;
  /** The netconf bytes the plugin read on stdin. */
  config: string;
}

export interface CniResponse {
  result?: Result100;
}

export interface IpamAllocationBody {
  owner: string;
  family: 4 | 6;
  ip: string;
  prefixLength: number;
  gateway?: string;
  pool: string;
  cidr: string;
  seq?: number;
  expiresAt?: number;
}

export interface IpamResponse {
  address: IpamAllocationBody;
  hostAddressing?: { ipv4?: string; ipv6?: string };
}

export interface IpamList {
  mode: string;
  allocations: IpamAllocationBody[];
  stats?: Record<string, number>;
}

export interface Health {
  status: 'ok' | 'starting' | 'degraded';
  nodeName?: string;
  uptimeSeconds?: number;
  kvstore: { backend: string; connected: boolean; revision: number; detail?: string };
  endpoints: number;
  ipam?: { mode: string; allocated: number };
}

/** Runtime files (socket, endpoint state, deletion queue): gone with a reboot, as the pods are. */
export const DEFAULT_STATE_DIR = '/var/run/tendril';
/** Durable data (the embedded kvstore): must survive reboots, so never on tmpfs. */
export const DEFAULT_LIB_DIR = '/var/lib/tendril';
export const DEFAULT_SOCKET = `${DEFAULT_STATE_DIR}/tendril.sock`;
export const SOCKET_ENV = 'TENDRIL_SOCK';
/** POST /cni's response header: the exit code tendril-cni exits with after printing the body. */
export const CNI_EXIT_CODE_HEADER = 'tendril-cni-exit-code';
