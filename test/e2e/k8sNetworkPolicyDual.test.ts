// The Kubernetes NetworkPolicy test (test/support/k8sNetworkPolicySuite.ts) on dual-stack pods.
import { k8sNetworkPolicySuite } from '../support/k8sNetworkPolicySuite.js';

k8sNetworkPolicySuite('dual', 'k8nd');
