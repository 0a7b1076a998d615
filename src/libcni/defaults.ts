/** Default libcni cache directory, shared with other runtimes on the host (kept schema-free: the CLI imports it at start-up). */
export const DEFAULT_CACHE_DIR = '/var/lib/cni';
