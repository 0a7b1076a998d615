import { CniError, CniErrorCode } from './errors.js';

/** CNI_ARGS as ordered key/value pairs ("K1=V1;K2=V2"). */
export type CniArgs = Array<[string, string]>;

/**
 * Splits at the first '=' of each pair, so a value may itself hold '='
 * (`TENDRIL_LABELS=app=web,tier=db`); Go's libcni passes such values through.
 */
export function parseCniArgs(text: string): CniArgs {
  if (text === '') return [];
  return text.split(';').map((pair) => {
    const eq = pair.indexOf('=');
    if (eq <= 0) {
      throw new CniError(CniErrorCode.InvalidEnvironmentVariables, `invalid CNI_ARGS pair "${pair}"`);
    }
    return [pair.slice(0, eq), pair.slice(eq + 1)];
  });
}

/** Refuses pairs that would not parse back the same: a value must not smuggle in another pair. */
export function formatCniArgs(args: CniArgs): string {
  for (const [k, v] of args) {
    if (k === '' || /[;=]/.test(k) || v.includes(';')) {
      throw new CniError(CniErrorCode.InvalidEnvironmentVariables, `invalid CNI_ARGS pair ${JSON.stringify([k, v])}: keys must be non-empty without ';' or '=', values without ';'`);
    }
  }
  return args.map(([k, v]) => `${k}=${v}`).join(';');
}
