/**
 * A bound on how deeply policy text may nest, checked on the YAML parser's
 * token tree before any document is built. yaml's lexer and parser keep
 * their own stacks, but its composer (and every walk of the result after it)
 * recurses once per level: `[[[[…` a hundred thousand deep ran the stack out
 * and the user read "Maximum call stack size exceeded". A policy document
 * nests about a dozen levels (spec.ingress[].from[].podSelector
 * .matchExpressions[].values[]); the limit leaves room for lists of them.
 */
import { CST, Parser } from 'yaml';
import { PolicyParseError } from './errors.js';

export const MAX_POLICY_NESTING = 64;

/** The collections one token holds directly (the items' keys and values). */
function children(token: CST.Token): CST.Token[] {
  switch (token.type) {
    case 'document':
      return token.value ? [token.value] : [];
    case 'block-map':
    case 'block-seq':
    case 'flow-collection':
      return (token.items as CST.CollectionItem[]).flatMap((item) => [item.key, item.value].filter((t): t is CST.Token => t !== undefined && t !== null));
    default:
      return [];
  }
}

const isCollection = (t: CST.Token) => t.type === 'block-map' || t.type === 'block-seq' || t.type === 'flow-collection';

function lineOf(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

/** Throws PolicyParseError naming the limit when a document of `text` nests collections deeper than MAX_POLICY_NESTING. */
export function checkPolicyNesting(text: string): void {
  let doc = -1;
  for (const top of new Parser().parse(text)) {
    if (top.type !== 'document') continue;
    doc++;
    // Iterative on purpose: the point is not to recurse once per level.
    const stack: Array<[CST.Token, number]> = [[top, 0]];
    while (stack.length > 0) {
      const [token, depth] = stack.pop()!;
      const d = isCollection(token) ? depth + 1 : depth;
      if (d > MAX_POLICY_NESTING) {
        throw new PolicyParseError(doc, `collections nested deeper than ${MAX_POLICY_NESTING} levels (the limit for policy documents)`, lineOf(text, token.offset));
      }
      for (const c of children(token)) stack.push([c, d]);
    }
  }
}
