/**
 * tendril's flow UI (Hubble UI's role): a live map of namespaces and
 * workloads with edges colored by verdict, the flow table with
 * `tendril observe`'s filters, what decided each drop, and a
 * NetworkPolicy suggested from what a workload was seen doing. It reads
 * GET /v1/flows (following) and GET /v1/policy of its own origin.
 */
import { render } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { buildFlowMap } from '../src/flow/flowMap.js';
import { FLOW_VERDICTS } from '../src/flow/types.js';
import { streamFlows } from './api.js';
import { Details } from './Details.js';
import { FlowTable } from './FlowTable.js';
import { MapView } from './MapView.js';
import type { Selection } from './selection.js';
import { FlowStore } from './store.js';
import './style.css';

/** Flows in view at most: the newest are kept. */
const MAX_FLOWS = 10_000;
/** A stream's lines are drawn at most this often, and at most a fifth of the time (a big map drawn slowly is drawn less often). */
const RENDER_EVERY_MS = 250;
const PROTOCOLS = ['tcp', 'udp', 'icmp', 'icmpv6', 'sctp'];

interface Query {
  namespace: string;
  text: string;
  verdict: string;
  protocol: string;
}

/** `from-pod=ns/x port=80 label=app=db` as query parameters; a token without '=' is an error. */
function filterParams(q: Query): URLSearchParams | string {
  const p = new URLSearchParams({ last: String(MAX_FLOWS), follow: 'true' });
  for (const token of q.text.split(/\s+/).filter((t) => t !== '')) {
    const eq = token.indexOf('=');
    if (eq <= 0 || eq === token.length - 1) return `"${token}" is not name=value (e.g. from-pod=default/web, to-port=80, label=app=db)`;
    p.append(token.slice(0, eq), token.slice(eq + 1));
  }
  if (q.namespace !== '') p.append('namespace', q.namespace);
  if (q.verdict !== '') p.append('verdict', q.verdict);
  if (q.protocol !== '') p.append('protocol', q.protocol);
  return p;
}

function App() {
  const store = useRef(new FlowStore(MAX_FLOWS)).current;
  const [version, setVersion] = useState(0);
  const [query, setQuery] = useState<Query>({ namespace: '', text: '', verdict: '', protocol: '' });
  const [draft, setDraft] = useState('');
  const [live, setLive] = useState(true);
  const [state, setState] = useState<{ status: 'connecting' | 'following' | 'ended' | 'error'; message?: string }>({ status: 'connecting' });
  const [selection, setSelection] = useState<Selection | undefined>(undefined);
  const namespacesSeen = useRef(new Set<string>()).current;
  const drawing = useRef({ since: 0, lastMs: 0 }).current;

  const params = filterParams(query);
  const paramText = typeof params === 'string' ? params : params.toString();
  useEffect(() => {
    if (typeof params === 'string') {
      setState({ status: 'error', message: params });
      return;
    }
    if (!live) return;
    const abort = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const draw = () => {
      timer = undefined;
      drawing.since = performance.now();
      setVersion(store.version);
    };
    setState({ status: 'connecting' });
    streamFlows(
      params,
      (lines) => {
        store.add(lines);
        setState((s) => (s.status === 'following' ? s : { status: 'following' }));
        timer ??= setTimeout(draw, Math.max(RENDER_EVERY_MS, 4 * drawing.lastMs));
      },
      abort.signal,
    ).then(
      () => setState({ status: 'ended' }),
      (e: unknown) => {
        if (!abort.signal.aborted) setState({ status: 'error', message: (e as Error).message });
      },
    );
    return () => {
      abort.abort();
      if (timer !== undefined) clearTimeout(timer);
    };
    // The stream restarts when the query or live changes, not on every render.
  }, [paramText, live]);

  const flows = useMemo(() => store.list(), [version]);
  useEffect(() => {
    if (drawing.since > 0) drawing.lastMs = performance.now() - drawing.since;
  }, [version]);
  const map = useMemo(() => buildFlowMap(flows, query.namespace !== '' ? { namespace: query.namespace } : {}), [flows, query.namespace]);
  for (const ns of map.namespaces) namespacesSeen.add(ns);
  const apply = (q: Partial<Query>) => {
    store.clear();
    setVersion(store.version);
    setSelection(undefined);
    setQuery({ ...query, ...q });
  };
  const select = (s: Selection) => {
    if (s.kind === 'namespace') apply({ namespace: s.namespace });
    else setSelection(s);
  };
  const unavailable = [...store.nodes.values()].filter((n) => n.state === 'unavailable');

  return (
    <div class="app" data-flows={flows.length} data-workloads={map.workloads.size} data-status={state.status}>
      <header>
        <h1>tendril flows</h1>
        <select class="namespace-select" value={query.namespace} onChange={(e) => apply({ namespace: (e.currentTarget as HTMLSelectElement).value })}>
          <option value="">all namespaces</option>
          {[...namespacesSeen].sort().map((ns) => (
            <option key={ns} value={ns}>
              {ns}
            </option>
          ))}
        </select>
        <button type="button" class="live" onClick={() => setLive(!live)} title={live ? 'stop following new flows' : 'follow new flows again'}>
          {live ? '❚❚ pause' : '▶ follow'}
        </button>
        <span class={`status status-${state.status}`}>
          {state.status === 'error' ? state.message : state.status} · {flows.length} flows · {map.workloads.size} workloads · {map.edges.length} edges
          {store.lost > 0 ? ` · ${store.lost} lost` : ''}
          {unavailable.length > 0 ? ` · unavailable: ${unavailable.map((n) => `${n.node} (${n.message ?? ''})`).join(', ')}` : ''}
        </span>
      </header>
      <main>
        <section class="top">
          <MapView map={map} selection={selection} onSelect={select} />
          <Details map={map} flows={flows} selection={selection} />
        </section>
        <form
          class="filters"
          onSubmit={(e) => {
            e.preventDefault();
            apply({ text: draft });
          }}
        >
          <input
            class="filter-text"
            name="filter"
            placeholder="filters: pod=ns/name from-label=app=web to-port=80 ip=10.0.0.0/8 type=drop …"
            value={draft}
            onInput={(e) => setDraft((e.currentTarget as HTMLInputElement).value)}
          />
          <select class="verdict-select" value={query.verdict} onChange={(e) => apply({ verdict: (e.currentTarget as HTMLSelectElement).value, text: draft })}>
            <option value="">any verdict</option>
            {FLOW_VERDICTS.map((v) => (
              <option key={v} value={v}>
                {v}
              </option>
            ))}
          </select>
          <select class="protocol-select" value={query.protocol} onChange={(e) => apply({ protocol: (e.currentTarget as HTMLSelectElement).value, text: draft })}>
            <option value="">any protocol</option>
            {PROTOCOLS.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
          <button type="submit">filter</button>
        </form>
        <FlowTable flows={flows} selected={selection?.kind === 'flow' ? selection.flow : undefined} onSelect={(f) => setSelection({ kind: 'flow', flow: f })} />
      </main>
    </div>
  );
}

render(<App />, document.getElementById('app')!);
