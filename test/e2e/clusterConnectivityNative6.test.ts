// IPv6 pods across nodes (test/e2e/clusterIpv6Suite.ts) in native routing.
import { clusterIpv6Suite } from './clusterIpv6Suite.js';

clusterIpv6Suite({ tag: 'cn6', routingMode: 'native' });
