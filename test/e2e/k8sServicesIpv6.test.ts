// The Kubernetes Service suite (test/support/k8sServicesSuite.ts) on IPv6 pods.
import { k8sServicesSuite } from '../support/k8sServicesSuite.js';

k8sServicesSuite(6, 'k8s6');
