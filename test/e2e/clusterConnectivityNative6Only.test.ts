// IPv6 pods across nodes (test/e2e/clusterIpv6Suite.ts) in native routing, each node known by its IPv6 address only.
import { clusterIpv6Suite } from './clusterIpv6Suite.js';

clusterIpv6Suite({ tag: 'cn6o', routingMode: 'native', ipv6Only: true });
