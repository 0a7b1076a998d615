import { type CodedErrorJson, CodedError } from '../../errors/codedError.js';
import { describeLiveAgent, type LiveAgent } from './liveAgents.js';

/**
 * Why `tendril-agent cleanup` did nothing: an agent still runs on the node,
 * nobody confirmed, or a directory it was given is not one it may remove.
 */
export type CleanupErrorCode = 'AGENT_RUNNING' | 'NOT_CONFIRMED' | 'UNSAFE_PATH';

export class CleanupError extends CodedError<CleanupErrorCode> {}

/** An agent uses what cleanup would remove: it names each one found (pid, socket, how it was found). */
export class AgentRunningError extends CleanupError {
  constructor(readonly agents: readonly LiveAgent[]) {
    super('AGENT_RUNNING', `refusing: ${agents.length === 1 ? 'an agent uses' : `${agents.length} agents use`} this state: ${agents.map(describeLiveAgent).join('; ')}; stop it first (nothing was changed)`);
  }

  protected override toJSONAt(depth: number): CodedErrorJson<CleanupErrorCode> & { agents: readonly LiveAgent[] } {
    return { ...super.toJSONAt(depth), agents: this.agents };
  }
}
