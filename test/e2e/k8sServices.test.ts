// The Kubernetes Service suite (test/support/k8sServicesSuite.ts) on IPv4 pods.
import { k8sServicesSuite } from '../support/k8sServicesSuite.js';

k8sServicesSuite(4, 'k8s');
