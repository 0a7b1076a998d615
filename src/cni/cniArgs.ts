import { CniError, CniErrorCode } from './errors.js';

/** CNI_ARGS as ordered key/value pairs ("K1=V1;K2=V2"). */
export type CniArgs = Array<[string, string]>;

export function parseCniArgs(text: string): CniArgs {
  if (text === '') return [];
  return text.split(';').map((pair) => {
    const eq = pair.indexOf('=');
    if (eq <= 0 || pair.indexOf('=', eq + 1) >= 0) {
      throw new CniError(CniErrorCode.InvalidEnvironmentVariables, `invalid CNI_ARGS pair "${pair}"`);
    }
    return [pair.slice(0, eq), pair.slice(eq + 1)];
  });
}

export function formatCniArgs(args: CniArgs): string {
  return args.map(([k, v]) => `${k}=${v}`).join(';');
}
