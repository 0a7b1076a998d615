// The NodePort and masquerade suite (test/support/servicesNodePortSuite.ts) on dual-stack pods.
import { servicesNodePortSuite } from '../support/servicesNodePortSuite.js';

servicesNodePortSuite('dual', 'svnd');
