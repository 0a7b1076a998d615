/**
 * Putting several nodes' flows in one time order. A history answer is a
 * k-way merge of the nodes' answers (each in its own time order) by
 * `event.time`, and `last` is applied to the merge: the newest `last` of the
 * cluster are among the newest `last` of each node. A followed stream has no
 * end to wait for, so new flows wait in a reorder window: each is held
 * `windowMs` after it arrived and leaves in time order with the others held;
 * a flow that comes later than that (a node far behind) leaves late rather
 * than never.
 */

/** A flow line as the relay passes it on: its time, its node and its JSON text as the node wrote it (not encoded again). */
export interface TimedLine {
  /** `event.time` in ms since the epoch. */
  time: number;
  node: string;
  text: string;
}

const before = (a: TimedLine, b: TimedLine): boolean => a.time < b.time || (a.time === b.time && a.node < b.node);

/** A binary min-heap of lines (oldest first; by node on equal times). */
class LineHeap<T extends { line: TimedLine }> {
  readonly items: T[] = [];

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    const a = this.items;
    a.push(item);
    let i = a.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(a[i]!.line, a[parent]!.line)) break;
      [a[i], a[parent]] = [a[parent]!, a[i]!];
      i = parent;
    }
  }

  pop(): T | undefined {
    const a = this.items;
    const top = a[0];
    const end = a.pop();
    if (a.length > 0 && end !== undefined) {
      a[0] = end;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let min = i;
        if (l < a.length && before(a[l]!.line, a[min]!.line)) min = l;
        if (r < a.length && before(a[r]!.line, a[min]!.line)) min = r;
        if (min === i) break;
        [a[i], a[min]] = [a[min]!, a[i]!];
        i = min;
      }
    }
    return top;
  }
}

/** The nodes' answers merged oldest first; with `last`, only the newest `last` of the merge. */
export function mergeHistories(answers: readonly (readonly TimedLine[])[], last?: number): TimedLine[] {
  const heap = new LineHeap<{ line: TimedLine; from: number; at: number }>();
  answers.forEach((lines, from) => {
    if (lines.length > 0) heap.push({ line: lines[0]!, from, at: 0 });
  });
  const out: TimedLine[] = [];
  for (let top = heap.pop(); top !== undefined; top = heap.pop()) {
    out.push(top.line);
    const next = answers[top.from]![top.at + 1];
    if (next !== undefined) heap.push({ line: next, from: top.from, at: top.at + 1 });
  }
  if (last === undefined || out.length <= last) return out;
  return last <= 0 ? [] : out.slice(out.length - last);
}

/**
 * The reorder window of a followed stream: push() each flow as it arrives,
 * drain(now) hands on, oldest first, those held at least `windowMs` (or the
 * oldest beyond `maxHeld`, so a flood cannot grow it without bound).
 */
export class ReorderWindow {
  readonly #heap = new LineHeap<{ line: TimedLine; arrived: number }>();

  constructor(
    readonly windowMs: number,
    readonly maxHeld = 100_000,
  ) {}

  get size(): number {
    return this.#heap.size;
  }

  push(line: TimedLine, now: number): void {
    this.#heap.push({ line, arrived: now });
  }

  /** The lines due at `now`, oldest first. */
  drain(now: number, out: (line: TimedLine) => void): void {
    for (;;) {
      const top = this.#heap.peek();
      if (top === undefined) return;
      if (top.arrived + this.windowMs > now && this.#heap.size <= this.maxHeld) return;
      this.#heap.pop();
      out(top.line);
    }
  }

  /** Everything held, oldest first (the stream ends). */
  flush(out: (line: TimedLine) => void): void {
    for (let top = this.#heap.pop(); top !== undefined; top = this.#heap.pop()) out(top.line);
  }
}
