import { createRequire } from 'node:module';
import { installPath } from '../../installLayout.js';

/**
 * Loads the kernel addon (src/datapath/kernel/native, built by `make build`
 * into build/native/). TENDRIL_KERNEL_ADDON points at another build of it,
 * for example the AddressSanitizer one `make check-native` uses.
 */
export function addonPath(): string {
  return process.env.TENDRIL_KERNEL_ADDON ?? installPath('build', 'native', 'tendril_kernel.node');
}

let loaded: unknown;

/** The addon's exports; each part of the kernel layer types the functions it uses. */
export function loadAddon(): unknown {
  if (loaded === undefined) loaded = createRequire(import.meta.url)(addonPath());
  return loaded;
}
