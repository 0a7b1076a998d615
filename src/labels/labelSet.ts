import { LabelError, LabelErrorCode } from './errors.js';
import { compareLabels, formatLabel, labelMatches, makeLabel, parseLabel, type Label } from './label.js';
import { LabelSource } from './source.js';

/** `source:key`, the uniqueness key inside a set: one value per key per source. */
function slotOf(l: Label): string {
  return `${l.source}:${l.key}`;
}

/**
 * A sorted, immutable set of labels with at most one value per (source, key).
 * Its string form (`k8s:app=web;k8s:io.kubernetes.pod.namespace=default;`,
 * Cilium's SortedList form) is stable across processes and releases, so it is
 * used as the identity kvstore key `…/value/<sorted labels>`.
 */
export class LabelSet implements Iterable<Label> {
  static readonly EMPTY = new LabelSet([]);

  readonly #labels: readonly Label[];
  readonly #bySlot: ReadonlyMap<string, Label>;
  #text: string | undefined;

  private constructor(sorted: readonly Label[]) {
    this.#labels = Object.freeze(sorted);
    this.#bySlot = new Map(sorted.map((l) => [slotOf(l), l]));
  }

  /**
   * Builds a set from labels. An exact repeat is dropped; the same
   * (source, key) with two different values is an error, not a silent last-wins.
   */
  static from(labels: Iterable<Label>): LabelSet {
    const bySlot = new Map<string, Label>();
    for (const l of labels) {
      const slot = slotOf(l);
      const prev = bySlot.get(slot);
      if (prev !== undefined && prev.value !== l.value) {
        throw new LabelError(
          LabelErrorCode.DUPLICATE_KEY,
          `label ${slot} given twice with different values ("${prev.value}" and "${l.value}")`,
          slot,
        );
      }
      bySlot.set(slot, l);
    }
    return new LabelSet([...bySlot.values()].sort(compareLabels));
  }

  /** Parses label strings (`k8s:app=web`, `reserved:host`, `app=web` → unspec). */
  static parse(texts: Iterable<string>, defaultSource: LabelSource = LabelSource.Unspec): LabelSet {
    return LabelSet.from([...texts].map((t) => parseLabel(t, defaultSource)));
  }

  /** A `{key: value}` map (pod labels, container labels) with one source. */
  static fromRecord(source: LabelSource, record: Readonly<Record<string, string>>): LabelSet {
    return LabelSet.from(Object.entries(record).map(([k, v]) => makeLabel(source, k, v)));
  }

  /** Reads the string form back (inverse of toString; '' is the empty set). */
  static fromSortedString(text: string): LabelSet {
    if (text === '') return LabelSet.EMPTY;
    const parts = text.endsWith(';') ? text.slice(0, -1).split(';') : text.split(';');
    return LabelSet.from(parts.map((p) => parseLabel(p)));
  }

  get size(): number {
    return this.#labels.length;
  }

  isEmpty(): boolean {
    return this.#labels.length === 0;
  }

  [Symbol.iterator](): Iterator<Label> {
    return this.#labels[Symbol.iterator]();
  }

  toArray(): readonly Label[] {
    return this.#labels;
  }

  /** The label at (source, key); with source `any`, the first label of that key in any source. */
  get(key: string, source: LabelSource = LabelSource.Any): Label | undefined {
    if (source !== LabelSource.Any) return this.#bySlot.get(`${source}:${key}`);
    return this.#labels.find((l) => l.key === key);
  }

  /** Every label with this key (any source), in set order. */
  getAll(key: string): Label[] {
    return this.#labels.filter((l) => l.key === key);
  }

  has(key: string, source: LabelSource = LabelSource.Any): boolean {
    return this.get(key, source) !== undefined;
  }

  /** Does some label of this set match `selector` (source `any` matches every source)? */
  matches(selector: Label): boolean {
    return this.#labels.some((l) => labelMatches(selector, l));
  }

  /** Does every label of `other` match some label of this set? */
  containsAll(other: LabelSet): boolean {
    return other.#labels.every((sel) => this.matches(sel));
  }

  hasSource(source: LabelSource): boolean {
    return this.#labels.some((l) => l.source === source);
  }

  filter(pred: (l: Label) => boolean): LabelSet {
    const kept = this.#labels.filter(pred);
    return kept.length === this.#labels.length ? this : new LabelSet(kept);
  }

  /** This set with `labels` added; a label in `labels` replaces the same (source, key) here. */
  with(labels: Iterable<Label>): LabelSet {
    const bySlot = new Map(this.#bySlot);
    for (const l of LabelSet.from(labels)) bySlot.set(slotOf(l), l);
    return new LabelSet([...bySlot.values()].sort(compareLabels));
  }

  /** This set without the labels of this key (in `source`, or every source for `any`). */
  without(key: string, source: LabelSource = LabelSource.Any): LabelSet {
    return this.filter((l) => !(l.key === key && (source === LabelSource.Any || l.source === source)));
  }

  equals(other: LabelSet): boolean {
    return this === other || this.toString() === other.toString();
  }

  /** Label strings in sorted order. */
  toStrings(): string[] {
    return this.#labels.map(formatLabel);
  }

  /** The stable sorted form, each label followed by ';' (Cilium's SortedList). */
  toString(): string {
    this.#text ??= this.#labels.map((l) => `${formatLabel(l)};`).join('');
    return this.#text;
  }

  /** JSON as the list of label strings, the form the agent API returns. */
  toJSON(): string[] {
    return this.toStrings();
  }

  /** `{key: value}` of the labels of one source (e.g. to hand pod labels back). */
  toRecord(source: LabelSource): Record<string, string> {
    const out: Record<string, string> = {};
    for (const l of this.#labels) if (l.source === source) out[l.key] = l.value;
    return out;
  }
}
