/**
 * The flow table, newest first. Only the rows in sight are in the DOM
 * (fixed row height, a spacer for the rest), so 10,000 flows scroll as
 * lightly as 10.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { eventKind, flowSummary, flowTime, peerText } from '../src/flow/format.js';
import type { Flow } from '../src/flow/types.js';
import { VERDICT_COLORS } from './colors.js';

const ROW_H = 24;
const OVERSCAN = 10;

function portOf(f: Flow): string {
  const e = f.event;
  return e.protocol === 'tcp' || e.protocol === 'udp' || e.protocol === 'sctp' ? `${e.destination.port}/${e.protocol}` : e.protocol;
}

export function FlowTable(props: { flows: Flow[]; selected: Flow | undefined; onSelect: (f: Flow) => void }) {
  const { flows } = props;
  const [top, setTop] = useState(0);
  const [height, setHeight] = useState(400);
  const body = useRef<HTMLDivElement>(null);
  // Measured when the box changes, never in a render: reading it there forces a layout of the whole page each time.
  useEffect(() => {
    const el = body.current;
    if (el === null) return;
    const seen = new ResizeObserver(() => setHeight(el.clientHeight));
    seen.observe(el);
    return () => seen.disconnect();
  }, []);
  const first = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
  const last = Math.min(flows.length, Math.ceil((top + height) / ROW_H) + OVERSCAN);
  const rows: Flow[] = [];
  // Newest first: the list is oldest first.
  for (let i = first; i < last; i++) rows.push(flows[flows.length - 1 - i]!);
  return (
    <div class="table">
      <div class="thead">
        <span class="c-time">time</span>
        <span class="c-peer">source</span>
        <span class="c-peer">destination</span>
        <span class="c-port">port</span>
        <span class="c-verdict">verdict</span>
        <span class="c-kind">type</span>
        <span class="c-count">count</span>
        <span class="c-summary">summary</span>
      </div>
      <div
        class="tbody"
        ref={body}
        onScroll={(e) => setTop((e.currentTarget as HTMLElement).scrollTop)}
      >
        <div style={{ height: `${flows.length * ROW_H}px`, position: 'relative' }}>
          {rows.map((f, i) => (
            <div
              key={`${first + i}`}
              class={`flow-row${f === props.selected ? ' selected' : ''}`}
              data-verdict={f.verdict}
              style={{ top: `${(first + i) * ROW_H}px` }}
              onClick={() => props.onSelect(f)}
            >
              <span class="c-time">{flowTime(f.event.time)}</span>
              <span class="c-peer" title={peerText(f.event.source, f.event.protocol)}>
                {peerText(f.event.source, f.event.protocol)}
              </span>
              <span class="c-peer" title={peerText(f.event.destination, f.event.protocol)}>
                {peerText(f.event.destination, f.event.protocol)}
              </span>
              <span class="c-port">{portOf(f)}</span>
              <span class="c-verdict" style={{ color: VERDICT_COLORS[f.verdict] }}>
                {f.verdict}
              </span>
              <span class="c-kind">{eventKind(f)}</span>
              <span class="c-count">{f.count}</span>
              <span class="c-summary" title={flowSummary(f)}>
                {flowSummary(f)}
              </span>
            </div>
          ))}
        </div>
      </div>
    </div>
  );
}
