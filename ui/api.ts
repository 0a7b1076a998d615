/**
 * The UI's two requests, to its own origin: GET /v1/flows (NDJSON FlowLines,
 * read as they stream while following) and GET /v1/policy. A server that
 * wants a bearer token gets the one the page was opened with
 * (`https://relay:4245/#token=…`: a fragment never leaves the browser), kept
 * for the tab's session and taken off the address bar.
 */
import type { FlowLine } from '../src/flow/types.js';

const TOKEN_KEY = 'tendril-flows-token';

function bearerToken(): string | undefined {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get('token');
  if (fromHash !== null && fromHash !== '') {
    sessionStorage.setItem(TOKEN_KEY, fromHash);
    history.replaceState(null, '', location.pathname + location.search);
    return fromHash;
  }
  return sessionStorage.getItem(TOKEN_KEY) ?? undefined;
}

function headers(accept: string): Record<string, string> {
  const token = bearerToken();
  return { accept, ...(token !== undefined ? { authorization: `Bearer ${token}` } : {}) };
}

/** The API's error body's message, else the status. */
async function errorText(res: Response): Promise<string> {
  const text = await res.text();
  try {
    const body = JSON.parse(text) as { message?: string };
    if (typeof body.message === 'string') return body.message;
  } catch {
    // Not JSON: the text itself says it.
  }
  return `${res.status} ${res.statusText}${text !== '' ? `: ${text.slice(0, 300)}` : ''}`;
}

/**
 * Reads GET /v1/flows?`query` until it ends or `signal` aborts, handing
 * over the lines of each chunk. Rejects with the server's message on an
 * error answer.
 */
export async function streamFlows(query: URLSearchParams, onLines: (lines: FlowLine[]) => void, signal: AbortSignal): Promise<void> {
  const res = await fetch(`/v1/flows?${query.toString()}`, { signal, headers: headers('application/x-ndjson') });
  if (!res.ok) throw new Error(await errorText(res));
  if (res.body === null) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += value;
    const lines: FlowLine[] = [];
    let nl = buf.indexOf('\n');
    let start = 0;
    while (nl >= 0) {
      const line = buf.slice(start, nl);
      if (line !== '') lines.push(JSON.parse(line) as FlowLine);
      start = nl + 1;
      nl = buf.indexOf('\n', start);
    }
    buf = buf.slice(start);
    if (lines.length > 0) onLines(lines);
  }
}

export interface PolicyEntry {
  /** `Kind/namespace/name`, as a rule origin's `policy` names it. */
  name: string;
  document: Record<string, unknown>;
}

export async function fetchPolicies(): Promise<PolicyEntry[]> {
  const res = await fetch('/v1/policy', { headers: headers('application/json') });
  if (!res.ok) throw new Error(await errorText(res));
  return ((await res.json()) as { policies: PolicyEntry[] }).policies;
}
