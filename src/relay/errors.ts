import { ConfigError } from '../errors/configError.js';

/** A relay option that is wrong or does not fit the others: refused at start, nothing served. */
export class RelayConfigError extends ConfigError {}
