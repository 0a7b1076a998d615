// 20 pods added concurrently to one agent (test/support/agentPodsSuite.ts) on IPv4 pods.
import { agentPodsConcurrentSuite } from '../support/agentPodsSuite.js';

agentPodsConcurrentSuite(4, 'apc');
