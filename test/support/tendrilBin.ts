import { fileURLToPath } from 'node:url';

/** Absolute paths of the repo's launchers, resolved from dist/test/support/. */
export const TENDRIL_BIN = fileURLToPath(new URL('../../../bin/tendril', import.meta.url));

/** Where Debian's containernetworking-plugins package installs the reference plugins. */
export const REFERENCE_PLUGIN_DIR = '/usr/lib/cni';
