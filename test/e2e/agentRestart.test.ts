// The agent restart test (test/support/agentRestartSuite.ts) on IPv4 pods.
import { agentRestartSuite } from '../support/agentRestartSuite.js';

agentRestartSuite(4, 'rs');
