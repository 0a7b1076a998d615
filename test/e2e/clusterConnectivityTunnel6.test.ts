// IPv6 pods across nodes (test/e2e/clusterIpv6Suite.ts) through the overlay on an IPv4 underlay.
import { clusterIpv6Suite } from './clusterIpv6Suite.js';

clusterIpv6Suite({ tag: 'ct6', routingMode: 'tunnel' });
