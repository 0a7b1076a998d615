/**
 * The flows in view: the newest `cap` flows received, keyed as the agent
 * folds them (node + foldKey), so a flow sent again with a grown count
 * replaces its older self and moves to the newest end, as in the agent's
 * history.
 */
import { foldKey } from '../src/flow/foldKey.js';
import type { Flow, FlowLine, FlowNodeStatus } from '../src/flow/types.js';

export class FlowStore {
  readonly #flows = new Map<string, Flow>();
  /** Flows the server said it could not send. */
  lost = 0;
  readonly nodes = new Map<string, FlowNodeStatus>();
  /** Grows with every change: what views memoize on. */
  version = 0;
  #list: Flow[] | undefined;

  constructor(readonly cap: number) {}

  add(lines: readonly FlowLine[]): void {
    for (const line of lines) {
      if ('flow' in line) {
        const f = line.flow;
        const key = `${f.node}|${foldKey(f.event, f.verdict)}`;
        this.#flows.delete(key);
        this.#flows.set(key, f);
        if (this.#flows.size > this.cap) this.#flows.delete(this.#flows.keys().next().value as string);
      } else if ('lost' in line) this.lost += line.lost.count;
      else if ('nodeStatus' in line) this.nodes.set(line.nodeStatus.node, line.nodeStatus);
    }
    this.#list = undefined;
    this.version++;
  }

  clear(): void {
    this.#flows.clear();
    this.nodes.clear();
    this.lost = 0;
    this.#list = undefined;
    this.version++;
  }

  get size(): number {
    return this.#flows.size;
  }

  /** Oldest first. */
  list(): Flow[] {
    this.#list ??= [...this.#flows.values()];
    return this.#list;
  }
}
