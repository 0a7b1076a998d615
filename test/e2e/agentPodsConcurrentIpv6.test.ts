// 20 pods added concurrently to one agent (test/support/agentPodsSuite.ts) on IPv6 pods.
import { agentPodsConcurrentSuite } from '../support/agentPodsSuite.js';

agentPodsConcurrentSuite(6, 'apc6');
