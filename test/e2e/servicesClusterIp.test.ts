// The ClusterIP service suite (test/support/servicesClusterIpSuite.ts) on IPv4 pods.
import { servicesClusterIpSuite } from '../support/servicesClusterIpSuite.js';

servicesClusterIpSuite(4, 'svc');
