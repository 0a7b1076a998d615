// The backend-change service suite (test/support/servicesBackendsSuite.ts) on IPv4 pods.
import { servicesBackendsSuite } from '../support/servicesBackendsSuite.js';

servicesBackendsSuite(4, 'svb');
