// The agent restart test (test/support/agentRestartSuite.ts) on IPv6 pods.
import { agentRestartSuite } from '../support/agentRestartSuite.js';

agentRestartSuite(6, 'rs6');
