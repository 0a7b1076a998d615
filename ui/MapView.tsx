/**
 * The live map: namespace boxes with their workloads, edges colored by
 * verdict with their counts. SVG, zoomed with the wheel or the buttons and
 * panned by dragging; a click on a workload or an edge selects it.
 */
import { useMemo, useRef, useState } from 'preact/hooks';
import type { FlowEdge, FlowMap } from '../src/flow/flowMap.js';
import { workloadTitle } from '../src/flow/peer.js';
import type { FlowVerdict } from '../src/flow/types.js';
import { VERDICT_COLORS } from './colors.js';
import { layoutMap, NODE_H, NODE_W, toBorder } from './layout.js';
import type { Selection } from './selection.js';

const VERDICT_ORDER: FlowVerdict[] = ['forwarded', 'dropped', 'audit', 'would-drop', 'would-allow'];
/** Above this many edges the counts are in the edges' tooltips only. */
const MAX_LABELED_EDGES = 400;
const KIND_FILL: Record<string, string> = { pod: '#e8f0fe', world: '#eceff1', host: '#fff3e0', 'remote-node': '#fff3e0', reserved: '#f3e5f5' };

interface ViewBox {
  x: number;
  y: number;
  w: number;
  h: number;
}

interface EdgeShape {
  edge: FlowEdge;
  d: string;
  lx: number;
  ly: number;
}

function edgeShapes(map: FlowMap, nodes: ReturnType<typeof layoutMap>['nodes']): EdgeShape[] {
  const out: EdgeShape[] = [];
  for (const edge of map.edges) {
    const a = nodes.get(edge.from);
    const b = nodes.get(edge.to);
    if (a === undefined || b === undefined) continue;
    const ax = a.x + NODE_W / 2;
    const ay = a.y + NODE_H / 2;
    const bx = b.x + NODE_W / 2;
    const by = b.y + NODE_H / 2;
    const bend = 18 + VERDICT_ORDER.indexOf(edge.verdict) * 14;
    const len = Math.hypot(bx - ax, by - ay) || 1;
    if (edge.from === edge.to) {
      // A workload talking to itself: a loop above its box.
      const lx = ax + 30 + bend;
      const ly = a.y - 18 - bend / 2;
      out.push({ edge, d: `M ${ax + 20} ${a.y} C ${ax + 20} ${ly} ${lx} ${ly} ${lx} ${a.y}`, lx, ly: ly + 6 });
      continue;
    }
    // Bent to its left: A→B and B→A, and each verdict, take their own curve; a long one bends more, over the boxes between.
    const curve = bend + len * 0.12;
    const cx = (ax + bx) / 2 + (-(by - ay) / len) * curve;
    const cy = (ay + by) / 2 + ((bx - ax) / len) * curve;
    const [sx, sy] = toBorder(ax, ay, cx, cy);
    const [ex, ey] = toBorder(bx, by, cx, cy);
    out.push({ edge, d: `M ${sx} ${sy} Q ${cx} ${cy} ${ex} ${ey}`, lx: 0.25 * sx + 0.5 * cx + 0.25 * ex, ly: 0.25 * sy + 0.5 * cy + 0.25 * ey });
  }
  return out;
}

const short = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

export function MapView(props: { map: FlowMap; selection: Selection | undefined; onSelect: (s: Selection) => void }) {
  const { map, selection } = props;
  const layout = useMemo(() => layoutMap(map.workloads.values()), [map]);
  const shapes = useMemo(() => edgeShapes(map, layout.nodes), [map, layout]);
  // A small map at its own size, not blown up to fill the screen.
  const fitW = Math.max(layout.width + 40, 900);
  const fitH = Math.max(layout.height + 60, 330);
  const fit: ViewBox = { x: (layout.width - fitW) / 2, y: (layout.height - fitH) / 2, w: fitW, h: fitH };
  const [zoomed, setZoomed] = useState<ViewBox | undefined>(undefined);
  const view = zoomed ?? fit;
  const svg = useRef<SVGSVGElement>(null);
  const drag = useRef<{ x: number; y: number; view: ViewBox; moved: boolean } | undefined>(undefined);

  const scale = (): number => {
    const r = svg.current?.getBoundingClientRect();
    return r && r.width > 0 ? Math.max(view.w / r.width, view.h / r.height) : 1;
  };
  const zoom = (factor: number, px = 0.5, py = 0.5) => {
    const w = view.w * factor;
    const h = view.h * factor;
    setZoomed({ x: view.x + (view.w - w) * px, y: view.y + (view.h - h) * py, w, h });
  };
  const onWheel = (e: WheelEvent) => {
    e.preventDefault();
    const r = svg.current!.getBoundingClientRect();
    zoom(e.deltaY > 0 ? 1.15 : 1 / 1.15, (e.clientX - r.left) / r.width, (e.clientY - r.top) / r.height);
  };
  const onDown = (e: PointerEvent) => {
    drag.current = { x: e.clientX, y: e.clientY, view, moved: false };
  };
  const onMove = (e: PointerEvent) => {
    const d = drag.current;
    if (d === undefined || (e.buttons & 1) === 0) return;
    const dx = e.clientX - d.x;
    const dy = e.clientY - d.y;
    if (!d.moved && Math.hypot(dx, dy) < 4) return;
    d.moved = true;
    const s = scale();
    setZoomed({ ...d.view, x: d.view.x - dx * s, y: d.view.y - dy * s });
  };
  const onUp = () => {
    drag.current = undefined;
  };
  const clicked = (s: Selection) => (e: MouseEvent) => {
    e.stopPropagation();
    if (!drag.current?.moved) props.onSelect(s);
  };
  const labeled = shapes.length <= MAX_LABELED_EDGES;
  const selEdge = selection?.kind === 'edge' ? selection.edge.key : undefined;
  const selNode = selection?.kind === 'workload' ? selection.key : undefined;

  return (
    <div class="map">
      <div class="map-tools">
        <button type="button" title="zoom in" onClick={() => zoom(1 / 1.4)}>
          +
        </button>
        <button type="button" title="zoom out" onClick={() => zoom(1.4)}>
          −
        </button>
        <button type="button" title="fit the map" onClick={() => setZoomed(undefined)}>
          fit
        </button>
        <span class="legend">
          {VERDICT_ORDER.map((v) => (
            <span key={v}>
              <i style={{ background: VERDICT_COLORS[v] }} />
              {v}
            </span>
          ))}
        </span>
      </div>
      {map.workloads.size === 0 ? (
        <div class="empty">No flows in view yet.</div>
      ) : (
        <svg
          ref={svg}
          class="map-svg"
          viewBox={`${view.x} ${view.y} ${view.w} ${view.h}`}
          preserveAspectRatio="xMidYMid meet"
          onWheel={onWheel}
          onPointerDown={onDown}
          onPointerMove={onMove}
          onPointerUp={onUp}
          onPointerLeave={onUp}
        >
          <defs>
            {VERDICT_ORDER.map((v) => (
              <marker key={v} id={`arrow-${v}`} viewBox="0 0 10 10" refX="9" refY="5" markerUnits="userSpaceOnUse" markerWidth="10" markerHeight="10" orient="auto-start-reverse">
                <path d="M 0 0 L 10 5 L 0 10 z" fill={VERDICT_COLORS[v]} />
              </marker>
            ))}
          </defs>
          {layout.groups.map((g) => (
            <g key={g.key} class="group" data-namespace={g.namespace ?? ''}>
              <rect x={g.x} y={g.y} width={g.w} height={g.h} rx="8" />
              <text
                x={g.x + 10}
                y={g.y + 16}
                class={g.namespace !== undefined ? 'group-title link' : 'group-title'}
                onClick={g.namespace !== undefined ? clicked({ kind: 'namespace', namespace: g.namespace }) : undefined}
              >
                {g.title}
                {g.namespace !== undefined ? ' ›' : ''}
              </text>
            </g>
          ))}
          {shapes.map(({ edge, d }) => (
            <path
              key={edge.key}
              class={`edge${edge.key === selEdge ? ' selected' : ''}`}
              data-from={workloadTitle(map.workloads.get(edge.from)!)}
              data-to={workloadTitle(map.workloads.get(edge.to)!)}
              data-verdict={edge.verdict}
              data-count={edge.count}
              d={d}
              stroke={VERDICT_COLORS[edge.verdict]}
              stroke-width={Math.min(6, 1.4 + Math.log10(edge.count))}
              marker-end={`url(#arrow-${edge.verdict})`}
              fill="none"
              onClick={clicked({ kind: 'edge', edge })}
            >
              <title>
                {`${workloadTitle(map.workloads.get(edge.from)!)} → ${workloadTitle(map.workloads.get(edge.to)!)}: ${edge.verdict} ×${edge.count} (${[...edge.ports.keys()].slice(0, 5).join(', ')})`}
              </title>
            </path>
          ))}
          {labeled &&
            shapes.map(({ edge, lx, ly }) => (
              <text key={`l${edge.key}`} class="edge-count" x={lx} y={ly} fill={VERDICT_COLORS[edge.verdict]}>
                {edge.count}
              </text>
            ))}
          {[...layout.nodes.values()].map((n) => (
            <g
              key={n.key}
              class={`workload kind-${n.workload.kind}${n.key === selNode ? ' selected' : ''}`}
              data-workload={workloadTitle(n.workload)}
              data-key={n.key}
              onClick={clicked({ kind: 'workload', key: n.key })}
            >
              <rect x={n.x} y={n.y} width={NODE_W} height={NODE_H} rx="6" fill={KIND_FILL[n.workload.kind]} />
              <text x={n.x + NODE_W / 2} y={n.y + NODE_H / 2 + 4}>
                {short(n.workload.name, 20)}
              </text>
              <title>{`${workloadTitle(n.workload)} (identity ${n.workload.identity})`}</title>
            </g>
          ))}
        </svg>
      )}
    </div>
  );
}
