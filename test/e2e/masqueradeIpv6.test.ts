// The masquerade suite (test/support/masqueradeSuite.ts) on IPv6 pods (--ipv6-masquerade).
import { masqueradeSuite } from '../support/masqueradeSuite.js';

masqueradeSuite(6, 'msq6');
