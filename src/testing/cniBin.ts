import { fileURLToPath } from 'node:url';

/** The native relay runtimes exec (from dist/src/testing/ or src/testing/); TENDRIL_CNI_BIN swaps in another build of it (e.g. the ASan one). */
export const CNI_BIN = process.env.TENDRIL_CNI_BIN ?? fileURLToPath(new URL('../../../bin/tendril-cni', import.meta.url));
