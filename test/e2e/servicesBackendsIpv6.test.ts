// The backend-change service suite (test/support/servicesBackendsSuite.ts) on IPv6 pods.
import { servicesBackendsSuite } from '../support/servicesBackendsSuite.js';

servicesBackendsSuite(6, 'svb6');
