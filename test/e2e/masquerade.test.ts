// The masquerade suite (test/support/masqueradeSuite.ts) on IPv4 pods.
import { masqueradeSuite } from '../support/masqueradeSuite.js';

masqueradeSuite(4, 'msq');
