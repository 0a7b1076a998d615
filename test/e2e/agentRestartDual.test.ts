// The agent restart test (test/support/agentRestartSuite.ts) on dual-stack pods.
import { agentRestartSuite } from '../support/agentRestartSuite.js';

agentRestartSuite('dual', 'rsd');
