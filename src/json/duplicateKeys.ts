/**
 * A JSON text may name a key once per object. JSON.parse keeps the last
 * of repeated keys, so `{"id": 1, "id": 2}` reached a route as `{"id": 2}`
 * while a proxy, a log or an audit reading the first one saw `1`: two readers
 * of one body must not disagree. Fastify's JSON parser (secure-json-parse,
 * built on JSON.parse) has no option for it, so the API scans a request
 * body here before that parser runs, and the policy parser scans a JSON
 * document before it takes JSON.parse's value.
 */

/** Where the first repeated key of a JSON text is: its JSON Pointer-like path and the key. */
export interface DuplicateKey {
  key: string;
  /** The object holding it, as /a/0/b ('' for the top level). */
  path: string;
}

interface Frame {
  /** Keys seen so far; undefined for an array. */
  keys?: Set<string>;
  /** In an object: the next string is a key. */
  expectKey: boolean;
  /** The last key (object) or the current index (array): the name of a child container. */
  member: string;
  index: number;
  path: string;
}

/**
 * The first key that appears twice in one object of `text`, or undefined.
 * Iterative (a deep body must not run the stack out) and lenient: on text
 * that is not JSON it stops and answers undefined, leaving the syntax error
 * to the parser that runs next. Keys compare as decoded strings, so "a" and
 * "\u0061" are the same key.
 */
export function findDuplicateKey(text: string): DuplicateKey | undefined {
  return scanJson(text).duplicate;
}

/**
 * One pass over a JSON text: its first repeated key (as findDuplicateKey)
 * and how deeply its objects and arrays nest, so a caller can bound the
 * depth before anything recurses over the parsed value. Stops at the first
 * repeated key.
 */
export function scanJson(text: string): { duplicate?: DuplicateKey; depth: number } {
  let depth = 0;
  const duplicate = scan(text, (d) => {
    if (d > depth) depth = d;
  });
  return duplicate ? { duplicate, depth } : { depth };
}

function scan(text: string, onDepth: (depth: number) => void): DuplicateKey | undefined {
  const stack: Frame[] = [];
  const n = text.length;
  let i = 0;
  while (i < n) {
    const c = text.charCodeAt(i);
    const top = stack[stack.length - 1];
    if (c === 0x22 /* " */) {
      let j = i + 1;
      while (j < n && text.charCodeAt(j) !== 0x22) j += text.charCodeAt(j) === 0x5c /* \ */ ? 2 : 1;
      if (j >= n) return undefined;
      if (top?.keys && top.expectKey) {
        let key: string;
        try {
          key = JSON.parse(text.slice(i, j + 1)) as string;
        } catch {
          return undefined;
        }
        if (top.keys.has(key)) return { key, path: top.path };
        top.keys.add(key);
        top.member = key;
        top.expectKey = false;
      }
      i = j + 1;
      continue;
    }
    if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      const path = top === undefined ? '' : `${top.path}/${top.keys ? top.member : String(top.index)}`;
      stack.push(c === 0x7b ? { keys: new Set(), expectKey: true, member: '', index: 0, path } : { expectKey: false, member: '', index: 0, path });
      onDepth(stack.length);
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */ && top) {
      if (top.keys) top.expectKey = true;
      else top.index++;
    }
    i++;
  }
  return undefined;
}
