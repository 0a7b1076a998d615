import { IDENTITIES_PREFIX } from '../kvstore/keys.js';

/**
 * The identity key layout under one prefix (default
 * `tendril/state/identities/v1/`; tests pass a private prefix):
 *
 *   id/<n>                    → sorted labels   master key, no lease
 *   value/<labels>            → <n>             labels index, no lease; unique per label set
 *   value/<labels>/<node>     → <n>             usage key, on <node>'s lease
 *
 * The master and index keys are created together in one transaction, so a
 * number maps to one label set and a label set to one number. Usage keys say
 * which nodes hold a reference; an identity with none is garbage. A label set
 * string always ends with ';' and never contains a '/' after its last ';',
 * which is how index and usage keys are told apart.
 */
export class IdentityKeys {
  readonly idPrefix: string;
  readonly valuePrefix: string;

  constructor(readonly prefix: string = IDENTITIES_PREFIX) {
    this.idPrefix = `${prefix}id/`;
    this.valuePrefix = `${prefix}value/`;
  }

  id(n: number): string {
    return `${this.idPrefix}${n}`;
  }

  index(labels: string): string {
    return `${this.valuePrefix}${labels}`;
  }

  usagePrefix(labels: string): string {
    return `${this.valuePrefix}${labels}/`;
  }

  usage(labels: string, node: string): string {
    return `${this.valuePrefix}${labels}/${node}`;
  }

  /** Identity number from an `id/<n>` key, or undefined. */
  parseIdKey(key: string): number | undefined {
    if (!key.startsWith(this.idPrefix)) return undefined;
    const text = key.slice(this.idPrefix.length);
    return /^[1-9][0-9]{0,9}$/.test(text) ? Number(text) : undefined;
  }

  /** Splits a `value/…` key into the label set text and, for a usage key, the node. */
  parseValueKey(key: string): { labels: string; node?: string } | undefined {
    if (!key.startsWith(this.valuePrefix)) return undefined;
    const rest = key.slice(this.valuePrefix.length);
    if (rest.endsWith(';')) return { labels: rest };
    const slash = rest.lastIndexOf('/');
    const labels = rest.slice(0, slash);
    if (slash < 0 || !labels.endsWith(';')) return undefined;
    return { labels, node: rest.slice(slash + 1) };
  }
}
