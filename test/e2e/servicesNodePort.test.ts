// The NodePort and masquerade suite (test/support/servicesNodePortSuite.ts) on IPv4 pods.
import { servicesNodePortSuite } from '../support/servicesNodePortSuite.js';

servicesNodePortSuite(4, 'svn');
