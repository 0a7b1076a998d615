// The three PATCH bodies kube-apiserver takes in JSON: a JSON merge patch
// (RFC 7386), a JSON patch (RFC 6902), and a strategic merge patch. The real
// strategic merge patch merges lists by keys declared in the Go types; the
// fake has no such table, so it applies a strategic patch as a JSON merge
// patch except for the directives kubectl writes: `$setElementOrder/<list>`
// (the list is merged element by element on the key its entries name, usually
// `name`), `$patch: delete|replace`, `$deleteFromPrimitiveList/<list>` and
// `$retainKeys`. That covers what `kubectl apply` sends for the manifests in
// deploy/; a hand-written strategic patch of a keyed list without
// `$setElementOrder` replaces the list.

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** A patch the server cannot apply (answered 422, or 400 for a malformed body). */
export class PatchError extends Error {}

function isObject(v: unknown): v is { [k: string]: Json } {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

export function jsonMergePatch(target: Json | undefined, patch: Json): Json {
  if (!isObject(patch)) return patch;
  const out: { [k: string]: Json } = isObject(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = jsonMergePatch(out[k], v);
  }
  return out;
}

function mergeKeyedList(original: Json[], patchList: Json[], order: Json[]): Json[] {
  const key = order.length > 0 && isObject(order[0]) ? Object.keys(order[0])[0] : undefined;
  if (key === undefined) return patchList;
  const keyOf = (v: Json): string | undefined => (isObject(v) && v[key] !== undefined ? JSON.stringify(v[key]) : undefined);
  const fromPatch = new Map<string, Json>();
  for (const p of patchList) {
    const k = keyOf(p);
    if (k !== undefined) fromPatch.set(k, p);
  }
  const out: Json[] = [];
  for (const o of order) {
    const k = keyOf(o);
    if (k === undefined) continue;
    const patched = fromPatch.get(k);
    const orig = original.find((x) => keyOf(x) === k);
    if (patched !== undefined) {
      if (isObject(patched) && patched.$patch === 'delete') continue;
      out.push(strategicMergePatch(orig, patched));
    } else if (orig !== undefined) out.push(orig);
  }
  return out;
}

export function strategicMergePatch(target: Json | undefined, patch: Json): Json {
  if (!isObject(patch)) return patch;
  if (patch.$patch === 'replace') {
    const rest = { ...patch };
    delete rest.$patch;
    return rest;
  }
  if (patch.$patch === 'delete') return null;
  const out: { [k: string]: Json } = isObject(target) ? { ...target } : {};
  const orders = new Map<string, Json[]>();
  for (const [k, v] of Object.entries(patch)) {
    if (k.startsWith('$setElementOrder/') && Array.isArray(v)) orders.set(k.slice('$setElementOrder/'.length), v);
  }
  for (const [k, v] of Object.entries(patch)) {
    if (k.startsWith('$')) {
      if (k.startsWith('$deleteFromPrimitiveList/') && Array.isArray(v)) {
        const field = k.slice('$deleteFromPrimitiveList/'.length);
        const cur = out[field];
        if (Array.isArray(cur)) out[field] = cur.filter((x) => !v.some((d) => JSON.stringify(d) === JSON.stringify(x)));
      }
      continue;
    }
    if (v === null) {
      delete out[k];
      continue;
    }
    const order = orders.get(k);
    if (Array.isArray(v) && order !== undefined) {
      out[k] = mergeKeyedList(Array.isArray(out[k]) ? (out[k] as Json[]) : [], v, order);
      continue;
    }
    const merged = strategicMergePatch(out[k], v);
    if (merged === null) delete out[k];
    else out[k] = merged;
  }
  // A list named only in $setElementOrder (its elements unchanged) is reordered, not dropped.
  for (const [field, order] of orders) {
    if (!(field in patch) && Array.isArray(out[field])) out[field] = mergeKeyedList(out[field] as Json[], [], order);
  }
  return out;
}

function pointer(path: string): string[] {
  if (path === '') return [];
  if (!path.startsWith('/')) throw new PatchError(`invalid JSON pointer ${JSON.stringify(path)}`);
  return path
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function parentOf(doc: Json, parts: string[]): { parent: Json; last: string } {
  let cur: Json = doc;
  for (const p of parts.slice(0, -1)) {
    if (Array.isArray(cur)) cur = cur[Number(p)] as Json;
    else if (isObject(cur)) cur = cur[p] as Json;
    else cur = undefined as unknown as Json;
    if (cur === undefined) throw new PatchError(`doc is missing path: /${parts.join('/')}`);
  }
  return { parent: cur, last: parts[parts.length - 1]! };
}

/** RFC 6902 on a copy of doc: add, remove, replace, test, move, copy. */
export function jsonPatch(doc: Json, ops: Json): Json {
  if (!Array.isArray(ops)) throw new PatchError('a JSON patch must be an array of operations');
  let out: Json = structuredClone(doc);
  const get = (path: string): Json => {
    let cur: Json = out;
    for (const p of pointer(path)) {
      cur = (Array.isArray(cur) ? cur[Number(p)] : isObject(cur) ? cur[p] : undefined) as Json;
      if (cur === undefined) throw new PatchError(`doc is missing path: ${path}`);
    }
    return cur;
  };
  const remove = (path: string): Json => {
    const { parent, last } = parentOf(out, pointer(path));
    if (Array.isArray(parent)) return parent.splice(Number(last), 1)[0] as Json;
    if (isObject(parent) && last in parent) {
      const v = parent[last]!;
      delete parent[last];
      return v;
    }
    throw new PatchError(`unable to remove nonexistent key: ${path}`);
  };
  const add = (path: string, value: Json, replace: boolean): void => {
    const parts = pointer(path);
    if (parts.length === 0) {
      out = value;
      return;
    }
    const { parent, last } = parentOf(out, parts);
    if (Array.isArray(parent)) {
      const i = last === '-' ? parent.length : Number(last);
      if (replace) parent[i] = value;
      else parent.splice(i, 0, value);
    } else if (isObject(parent)) {
      if (replace && !(last in parent)) throw new PatchError(`replace operation does not apply: doc is missing key: ${path}`);
      parent[last] = value;
    } else throw new PatchError(`doc is missing path: ${path}`);
  };
  for (const op of ops) {
    if (!isObject(op) || typeof op.op !== 'string' || typeof op.path !== 'string') throw new PatchError('invalid JSON patch operation');
    const value = structuredClone(op.value ?? null);
    switch (op.op) {
      case 'add':
        add(op.path, value, false);
        break;
      case 'replace':
        add(op.path, value, true);
        break;
      case 'remove':
        remove(op.path);
        break;
      case 'test':
        if (JSON.stringify(get(op.path)) !== JSON.stringify(op.value)) throw new PatchError(`testing value ${op.path} failed`);
        break;
      case 'move':
        add(op.path, remove(String(op.from)), false);
        break;
      case 'copy':
        add(op.path, structuredClone(get(String(op.from))), false);
        break;
      default:
        throw new PatchError(`unexpected kind: ${op.op}`);
    }
  }
  return out;
}
