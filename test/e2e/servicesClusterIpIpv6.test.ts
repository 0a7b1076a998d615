// The ClusterIP service suite (test/support/servicesClusterIpSuite.ts) on IPv6 pods.
import { servicesClusterIpSuite } from '../support/servicesClusterIpSuite.js';

servicesClusterIpSuite(6, 'svc6');
