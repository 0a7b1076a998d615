// The NodePort and masquerade suite (test/support/servicesNodePortSuite.ts) on IPv6 pods.
import { servicesNodePortSuite } from '../support/servicesNodePortSuite.js';

servicesNodePortSuite(6, 'svn6');
