import type { FlowEdge } from '../src/flow/flowMap.js';
import type { Flow } from '../src/flow/types.js';

/** What the side panel shows: an edge of the map, a flow of the table, a workload, or a namespace to open. */
export type Selection =
  | { kind: 'edge'; edge: FlowEdge }
  | { kind: 'flow'; flow: Flow }
  | { kind: 'workload'; key: string }
  | { kind: 'namespace'; namespace: string };
