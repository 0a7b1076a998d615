// 20 pods added concurrently to one agent (test/support/agentPodsSuite.ts) on dual-stack pods.
import { agentPodsConcurrentSuite } from '../support/agentPodsSuite.js';

agentPodsConcurrentSuite('dual', 'apcd');
