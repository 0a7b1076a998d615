/**
 * Where the map draws its workloads: one box per namespace (the world, the
 * node and the other nodes share an "outside" box, first), workloads in a
 * grid inside it, boxes packed left to right in rows. Deterministic: the
 * same workloads land in the same places, so a live map does not jump.
 */
import type { Workload } from '../src/flow/peer.js';

export const NODE_W = 148;
export const NODE_H = 28;
const GAP_X = 18;
const GAP_Y = 16;
const PAD = 12;
const HEADER = 22;
const GROUP_GAP = 28;

export interface NodeBox {
  key: string;
  x: number;
  y: number;
  workload: Workload;
}

export interface GroupBox {
  key: string;
  /** The namespace, or undefined for the outside box. */
  namespace?: string;
  title: string;
  x: number;
  y: number;
  w: number;
  h: number;
}

export interface MapLayout {
  nodes: Map<string, NodeBox>;
  groups: GroupBox[];
  width: number;
  height: number;
}

/** Packs the boxes in rows about `aspect` times as wide as the whole is tall (the map's own shape on screen). */
export function layoutMap(workloads: Iterable<Workload>, aspect = 2.4): MapLayout {
  const byGroup = new Map<string, Workload[]>();
  for (const w of workloads) {
    const g = w.namespace ?? '';
    let list = byGroup.get(g);
    if (list === undefined) byGroup.set(g, (list = []));
    list.push(w);
  }
  const groupKeys = [...byGroup.keys()].sort((a, b) => (a === '' ? -1 : b === '' ? 1 : a.localeCompare(b)));
  const dims = new Map<string, { cols: number; w: number; h: number }>();
  let area = 0;
  let widest = 0;
  for (const g of groupKeys) {
    const n = byGroup.get(g)!.length;
    // Wider than tall, as a laptop screen is.
    const cols = Math.max(1, Math.min(n, Math.ceil(Math.sqrt(n * 3))));
    const rows = Math.ceil(n / cols);
    const w = PAD * 2 + cols * NODE_W + (cols - 1) * GAP_X;
    const h = HEADER + PAD * 2 + rows * NODE_H + (rows - 1) * GAP_Y;
    dims.set(g, { cols, w, h });
    area += (w + GROUP_GAP) * (h + GROUP_GAP);
    widest = Math.max(widest, w);
  }
  // A little over the ideal width, or two boxes that would just fit a row each get a row of their own.
  const rowWidth = Math.max(widest, Math.sqrt(area * aspect) * 1.25);
  const nodes = new Map<string, NodeBox>();
  const groups: GroupBox[] = [];
  let x = 0;
  let y = 0;
  let rowH = 0;
  let width = 0;
  for (const g of groupKeys) {
    const members = byGroup.get(g)!.sort((a, b) => a.name.localeCompare(b.name) || a.identity - b.identity);
    const { cols, w, h } = dims.get(g)!;
    if (x > 0 && x + w > rowWidth) {
      x = 0;
      y += rowH + GROUP_GAP;
      rowH = 0;
    }
    groups.push({ key: g === '' ? 'outside' : `ns:${g}`, ...(g !== '' ? { namespace: g } : {}), title: g === '' ? 'outside the namespaces' : g, x, y, w, h });
    members.forEach((m, i) => {
      nodes.set(m.key, { key: m.key, x: x + PAD + (i % cols) * (NODE_W + GAP_X), y: y + HEADER + PAD + Math.floor(i / cols) * (NODE_H + GAP_Y), workload: m });
    });
    x += w + GROUP_GAP;
    width = Math.max(width, x - GROUP_GAP);
    rowH = Math.max(rowH, h);
  }
  return { nodes, groups, width: Math.max(width, 1), height: Math.max(y + rowH, 1) };
}

/** Where the segment from `from` toward the center (cx, cy) of a node box meets the box's border. */
export function toBorder(cx: number, cy: number, fromX: number, fromY: number): [number, number] {
  const dx = fromX - cx;
  const dy = fromY - cy;
  if (dx === 0 && dy === 0) return [cx, cy];
  const t = Math.min(dx === 0 ? Infinity : NODE_W / 2 / Math.abs(dx), dy === 0 ? Infinity : NODE_H / 2 / Math.abs(dy));
  return [cx + dx * Math.min(t, 1), cy + dy * Math.min(t, 1)];
}
