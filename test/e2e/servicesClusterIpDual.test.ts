// The ClusterIP service suite (test/support/servicesClusterIpSuite.ts) on dual-stack pods: every row on IPv4 and on IPv6.
import { servicesClusterIpSuite } from '../support/servicesClusterIpSuite.js';

servicesClusterIpSuite('dual', 'svcd');
