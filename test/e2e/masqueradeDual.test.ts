// The masquerade suite (test/support/masqueradeSuite.ts) on dual-stack pods (--ipv6-masquerade).
import { masqueradeSuite } from '../support/masqueradeSuite.js';

masqueradeSuite('dual', 'msqd');
