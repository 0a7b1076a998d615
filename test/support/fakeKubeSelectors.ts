// Label and field selectors as kube-apiserver parses them for list and watch:
// labels: `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`;
// fields: `f=v`, `f==v`, `f!=v` on the fields the resource type supports (any
// other field is a 400, as on the real server).

export type ObjectMatcher = (obj: Record<string, unknown>) => boolean;

/** A selector the server refuses (the caller answers 400 BadRequest). */
export class SelectorError extends Error {}

function splitTopLevel(s: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = '';
  for (const ch of s) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      out.push(cur);
      cur = '';
    } else cur += ch;
  }
  out.push(cur);
  return out.map((p) => p.trim()).filter((p) => p !== '');
}

function labelsOf(obj: Record<string, unknown>): Record<string, string> {
  const meta = (obj.metadata ?? {}) as { labels?: Record<string, string> };
  return meta.labels ?? {};
}

export function parseLabelSelector(selector: string | null): ObjectMatcher {
  if (selector === null || selector.trim() === '') return () => true;
  const reqs: ObjectMatcher[] = splitTopLevel(selector).map((req) => {
    let m = /^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$/.exec(req);
    if (m !== null) {
      const key = m[1]!;
      const values = m[3]!.split(',').map((v) => v.trim());
      return m[2] === 'in'
        ? (o) => key in labelsOf(o) && values.includes(labelsOf(o)[key]!)
        : (o) => !(key in labelsOf(o)) || !values.includes(labelsOf(o)[key]!);
    }
    m = /^([^\s!=]+)\s*(==|=|!=)\s*([^\s,]*)$/.exec(req);
    if (m !== null) {
      const [, key, op, value] = m as unknown as [string, string, string, string];
      return op === '!=' ? (o) => labelsOf(o)[key] !== value : (o) => labelsOf(o)[key] === value;
    }
    m = /^(!?)([^\s!=()]+)$/.exec(req);
    if (m !== null) {
      const key = m[2]!;
      return m[1] === '!' ? (o) => !(key in labelsOf(o)) : (o) => key in labelsOf(o);
    }
    throw new SelectorError(`unable to parse requirement: ${JSON.stringify(req)}`);
  });
  return (o) => reqs.every((r) => r(o));
}

function fieldValue(obj: Record<string, unknown>, path: string): string {
  let cur: unknown = obj;
  for (const part of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return '';
    cur = (cur as Record<string, unknown>)[part];
  }
  // The real server compares the field's string form; unset is ''.
  return cur === undefined || cur === null ? '' : String(cur);
}

export function parseFieldSelector(selector: string | null, supported: readonly string[]): ObjectMatcher {
  if (selector === null || selector.trim() === '') return () => true;
  const reqs: ObjectMatcher[] = splitTopLevel(selector).map((req) => {
    const m = /^([^\s!=]+)\s*(==|=|!=)\s*(.*)$/.exec(req);
    if (m === null) throw new SelectorError(`invalid selector: '${req}'; can't understand '${req}'`);
    const [, field, op, value] = m as unknown as [string, string, string, string];
    if (!supported.includes(field)) {
      throw new SelectorError(`field label not supported: ${field}`);
    }
    return op === '!=' ? (o) => fieldValue(o, field) !== value : (o) => fieldValue(o, field) === value;
  });
  return (o) => reqs.every((r) => r(o));
}
