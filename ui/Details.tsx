/**
 * The side panel: for an edge or a flow, what decided it (the rule and
 * the policy's text from GET /v1/policy); for a workload, its labels and
 * "suggest a policy".
 */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { stringify } from 'yaml';
import type { FlowMap } from '../src/flow/flowMap.js';
import { eventKind, flowSummary, flowTime, peerText } from '../src/flow/format.js';
import { workloadOf, workloadTitle } from '../src/flow/peer.js';
import { type SuggestDirection, SuggestPolicyError, suggestPolicy } from '../src/flow/suggestPolicy.js';
import type { Flow, FlowVerdict } from '../src/flow/types.js';
import type { MonitorRule } from '../src/monitor/types.js';
import { fetchPolicies, type PolicyEntry } from './api.js';
import { VERDICT_COLORS } from './colors.js';
import type { Selection } from './selection.js';

function Verdict(props: { v: FlowVerdict }) {
  return (
    <span class="badge" style={{ background: VERDICT_COLORS[props.v] }}>
      {props.v}
    </span>
  );
}

/** The rule that decided, and the text of each policy it comes from. */
function RuleCard(props: { rule: MonitorRule; count?: number }) {
  const { rule } = props;
  const [policies, setPolicies] = useState<PolicyEntry[] | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  useEffect(() => {
    let live = true;
    fetchPolicies().then(
      (p) => live && setPolicies(p),
      (e: unknown) => live && setError((e as Error).message),
    );
    return () => {
      live = false;
    };
  }, [rule.cookie, rule.text]);
  return (
    <div class="rule">
      <div class="rule-text">
        rule: <code>{rule.text}</code>
        {props.count !== undefined ? ` ×${props.count}` : ''}
      </div>
      {error !== undefined && <div class="error">policies: {error}</div>}
      {rule.origins.length === 0 && <div class="muted">No policy document: the cookie is a built-in decision.</div>}
      {rule.origins.map((o) => {
        const doc = policies?.find((p) => p.name === o.policy);
        return (
          <div class="policy" key={`${o.policy}|${o.path}`}>
            <div>
              policy <b>{o.policy}</b> <span class="muted">{o.path}</span>
            </div>
            {policies === undefined && error === undefined && <div class="muted">loading…</div>}
            {policies !== undefined && doc === undefined && <div class="muted">not imported any more</div>}
            {doc !== undefined && <pre class="yaml policy-text">{stringify(doc.document, { lineWidth: 0 })}</pre>}
          </div>
        );
      })}
    </div>
  );
}

/** Distinct rules of some flows, with the flows' counts summed. */
function rulesOf(flows: Flow[]): Array<{ rule: MonitorRule; count: number }> {
  const m = new Map<string, { rule: MonitorRule; count: number }>();
  for (const f of flows) {
    const r = f.event.rule;
    if (r === undefined) continue;
    const held = m.get(r.text);
    if (held) held.count += f.count;
    else m.set(r.text, { rule: r, count: f.count });
  }
  return [...m.values()].sort((a, b) => b.count - a.count);
}

function FlowDetails(props: { flow: Flow }) {
  const f = props.flow;
  const e = f.event;
  return (
    <div class="details-body">
      <h3>
        flow <Verdict v={f.verdict} />
      </h3>
      <dl>
        <dt>source</dt>
        <dd>{peerText(e.source, e.protocol)}</dd>
        <dt>destination</dt>
        <dd>{peerText(e.destination, e.protocol)}</dd>
        <dt>type</dt>
        <dd>
          {eventKind(f)} {e.direction !== 'none' ? e.direction : ''}
        </dd>
        <dt>node</dt>
        <dd>{f.node}</dd>
        <dt>seen</dt>
        <dd>
          {flowTime(f.firstTime)} – {flowTime(e.time)} ×{f.count}
        </dd>
        <dt>summary</dt>
        <dd>{flowSummary(f)}</dd>
        {e.service?.name !== undefined && (
          <>
            <dt>service</dt>
            <dd>{e.service.name}</dd>
          </>
        )}
      </dl>
      {e.rule !== undefined && <RuleCard rule={e.rule} />}
    </div>
  );
}

function EdgeDetails(props: { map: FlowMap; edgeKey: string; flows: Flow[] }) {
  const edge = props.map.edges.find((e) => e.key === props.edgeKey);
  if (edge === undefined) return <div class="muted">That edge is no longer in view.</div>;
  const from = props.map.workloads.get(edge.from)!;
  const to = props.map.workloads.get(edge.to)!;
  const flows = props.flows.filter((f) => f.verdict === edge.verdict && workloadOf(f.event.source).key === edge.from && workloadOf(f.event.destination).key === edge.to);
  return (
    <div class="details-body">
      <h3>
        {workloadTitle(from)} → {workloadTitle(to)} <Verdict v={edge.verdict} />
      </h3>
      <div>
        ×{edge.count} in {edge.flows} flow{edge.flows === 1 ? '' : 's'}; ports{' '}
        {[...edge.ports.entries()]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 8)
          .map(([p, n]) => `${p} ×${n}`)
          .join(', ')}
      </div>
      {rulesOf(flows).map((r) => (
        <RuleCard key={r.rule.text} rule={r.rule} count={r.count} />
      ))}
      {edge.verdict === 'dropped' && rulesOf(flows).length === 0 && <div class="muted">No policy decided these drops: see each flow's reason in the table.</div>}
    </div>
  );
}

function WorkloadDetails(props: { map: FlowMap; workloadKey: string; flows: Flow[] }) {
  const w = props.map.workloads.get(props.workloadKey);
  const [dirs, setDirs] = useState<Record<SuggestDirection, boolean>>({ ingress: true, egress: true });
  const [withDropped, setWithDropped] = useState(false);
  const [asked, setAsked] = useState(0);
  const [copied, setCopied] = useState(false);
  const suggestion = useMemo(() => {
    if (asked === 0) return undefined;
    try {
      const directions = (['ingress', 'egress'] as const).filter((d) => dirs[d]);
      const verdicts: FlowVerdict[] = ['forwarded', 'audit', 'would-drop', ...(withDropped ? (['dropped', 'would-allow'] as const) : [])];
      return suggestPolicy(props.flows, props.workloadKey, { directions, verdicts });
    } catch (e) {
      if (e instanceof SuggestPolicyError) return e;
      throw e;
    }
    // Made when asked for, from the flows in view then: a live stream does not rewrite it under the reader.
  }, [asked]);
  if (w === undefined) return <div class="muted">That workload is no longer in view.</div>;
  const inbound = props.map.edges.filter((e) => e.to === w.key).reduce((s, e) => s + e.count, 0);
  const outbound = props.map.edges.filter((e) => e.from === w.key).reduce((s, e) => s + e.count, 0);
  const copy = async () => {
    if (suggestion === undefined || suggestion instanceof Error) return;
    try {
      await navigator.clipboard.writeText(suggestion.yaml);
      setCopied(true);
    } catch {
      const ta = document.querySelector<HTMLTextAreaElement>('.suggestion');
      ta?.select();
      setCopied(document.execCommand('copy'));
    }
  };
  return (
    <div class="details-body">
      <h3>{workloadTitle(w)}</h3>
      <div class="muted">
        identity {w.identity} · {w.kind} · in ×{inbound} · out ×{outbound}
      </div>
      <div class="labels">
        {w.labels.map((l) => (
          <code key={l}>{l}</code>
        ))}
      </div>
      {w.kind === 'pod' && (
        <div class="suggest">
          <h4>Suggest a policy</h4>
          <label>
            <input type="checkbox" name="ingress" checked={dirs.ingress} onChange={(e) => setDirs({ ...dirs, ingress: (e.currentTarget as HTMLInputElement).checked })} /> ingress
          </label>
          <label>
            <input type="checkbox" name="egress" checked={dirs.egress} onChange={(e) => setDirs({ ...dirs, egress: (e.currentTarget as HTMLInputElement).checked })} /> egress
          </label>
          <label title="allow what the policies in force refused, too">
            <input type="checkbox" name="dropped" checked={withDropped} onChange={(e) => setWithDropped((e.currentTarget as HTMLInputElement).checked)} /> include dropped
          </label>
          <button
            type="button"
            class="suggest-button"
            onClick={() => {
              setCopied(false);
              setAsked(asked + 1);
            }}
          >
            Suggest
          </button>
          {suggestion instanceof Error && <div class="error">{suggestion.message}</div>}
          {suggestion !== undefined && !(suggestion instanceof Error) && (
            <>
              <div class="muted">
                From {suggestion.flows} flow{suggestion.flows === 1 ? '' : 's'} in view. Review, then <code>tendril policy import</code> or <code>kubectl apply</code> it.{' '}
                <button type="button" onClick={() => void copy()}>
                  {copied ? 'copied' : 'copy'}
                </button>
              </div>
              <textarea class="suggestion yaml" readOnly spellcheck={false} value={suggestion.yaml} rows={Math.min(24, suggestion.yaml.split('\n').length + 1)} />
            </>
          )}
        </div>
      )}
    </div>
  );
}

export function Details(props: { map: FlowMap; flows: Flow[]; selection: Selection | undefined }) {
  const s = props.selection;
  return (
    <aside class="details">
      {s === undefined || s.kind === 'namespace' ? (
        <div class="muted help">
          Click a workload to see it and suggest a policy for it; click an edge or a row to see what decided it. Click a namespace's title to open it alone.
        </div>
      ) : s.kind === 'flow' ? (
        <FlowDetails flow={s.flow} />
      ) : s.kind === 'edge' ? (
        <EdgeDetails map={props.map} edgeKey={s.edge.key} flows={props.flows} />
      ) : (
        <WorkloadDetails key={s.key} map={props.map} workloadKey={s.key} flows={props.flows} />
      )}
    </aside>
  );
}
