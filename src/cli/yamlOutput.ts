import { stringify } from 'yaml';

/**
 * `-o yaml`'s rendering, in a module of its own that the CLI imports only for
 * that output: the YAML library is a third of the CLI's code. (A dynamic
 * import of the library itself would meet it as a CommonJS default export in
 * the bundle and as named exports under tsc's output.)
 */
export function toYaml(value: unknown): string {
  return stringify(value);
}
