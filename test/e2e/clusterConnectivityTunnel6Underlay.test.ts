// IPv6 and IPv4 pods across nodes (test/e2e/clusterIpv6Suite.ts) through the overlay on an IPv6-only underlay.
import { clusterIpv6Suite } from './clusterIpv6Suite.js';

clusterIpv6Suite({ tag: 'ct6u', routingMode: 'tunnel', underlay: 6 });
