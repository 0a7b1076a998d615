// The Kubernetes Service suite (test/support/k8sServicesSuite.ts) on dual-stack pods.
import { k8sServicesSuite } from '../support/k8sServicesSuite.js';

k8sServicesSuite('dual', 'k8sd');
