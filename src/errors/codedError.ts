/**
 * The one base class of tendril's typed errors (undici/fastify style): every
 * subsystem keeps its own table of codes with stable names, and callers
 * branch on `code` (or `instanceof`), never on message text. It imports
 * nothing of the project, so every subsystem, from src/cni up, may extend it.
 */

/** What `JSON.stringify` makes of a coded error: stable fields only, never the stack. */
export interface CodedErrorJson<C extends string | number = string | number> {
  code: C;
  /**
   * CodedError always fills in the class name and the message. They are
   * optional in the type only so that an error whose JSON is a wire format of
   * its own (CniError prints the CNI spec's `{code, msg, details}`) is still
   * a CodedError.
   */
  name?: string;
  message?: string;
  /** The cause chain, one level per `cause`, cut after MAX_CAUSE_DEPTH levels. */
  cause?: CauseJson;
}

/** A cause as JSON: a coded error's own JSON, or what is safe and stable to show of any other value. */
export type CauseJson = CodedErrorJson | { name: string; message: string; code?: string | number } | string;

/** Cause chains are walked this deep by toJSON; a longer (or cyclic) chain is cut there. */
export const MAX_CAUSE_DEPTH = 8;

export abstract class CodedError<C extends string | number = string> extends Error {
  readonly code: C;

  constructor(code: C, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    // The concrete class's own name ("InvalidKeyError", not "Error"), for
    // logs and for the `err.name` checks used where importing the class
    // would point up the dependency order.
    this.name = new.target.name;
  }

  toJSON(): CodedErrorJson<C> {
    return this.toJSONAt(0);
  }

  /**
   * Subclasses add their stable fields by overriding this and spreading
   * `super.toJSONAt(depth)`; `depth` is how deep in a cause chain this error sits.
   */
  protected toJSONAt(depth: number): CodedErrorJson<C> {
    const out: CodedErrorJson<C> = { name: this.name, code: this.code, message: this.message };
    if (this.cause !== undefined) out.cause = CodedError.causeJson(this.cause, depth + 1);
    return out;
  }

  private static causeJson(cause: unknown, depth: number): CauseJson {
    if (depth > MAX_CAUSE_DEPTH) return '[cause chain cut]';
    if (cause instanceof CodedError) return cause.toJSONAt(depth);
    if (cause instanceof Error) {
      const code = (cause as { code?: unknown }).code;
      return typeof code === 'string' || typeof code === 'number' ? { name: cause.name, message: cause.message, code } : { name: cause.name, message: cause.message };
    }
    return String(cause);
  }
}
