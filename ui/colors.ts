import type { FlowVerdict } from '../src/flow/types.js';

/** Edge and badge colors by verdict: green forwarded, red dropped, amber audit, purple would-drop. */
export const VERDICT_COLORS: Record<FlowVerdict, string> = {
  forwarded: '#2e9e44',
  dropped: '#d93025',
  audit: '#e8a200',
  'would-drop': '#8e44ad',
  'would-allow': '#1a73e8',
};
