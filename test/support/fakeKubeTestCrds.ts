// Small CRDs the fake API server's own tests (client-node and kubectl) register:
// one with a status subresource, one without, one cluster-scoped, each with a
// structural schema so pruning and validation apply as on a real cluster.

export interface TestCrdOptions {
  group?: string;
  plural: string;
  kind: string;
  scope: 'Namespaced' | 'Cluster';
  /** Declares `subresources: {status: {}}`. */
  status?: boolean;
}

export const TEST_CRD_GROUP = 'tdl.example.com';

export function testCrd(o: TestCrdOptions): Record<string, unknown> {
  const group = o.group ?? TEST_CRD_GROUP;
  const version: Record<string, unknown> = {
    name: 'v1',
    served: true,
    storage: true,
    schema: {
      openAPIV3Schema: {
        type: 'object',
        properties: {
          spec: { type: 'object', properties: { size: { type: 'integer' }, owner: { type: 'string' } } },
          status: { type: 'object', properties: { phase: { type: 'string' }, observedGeneration: { type: 'integer' } } },
        },
      },
    },
  };
  if (o.status === true) version.subresources = { status: {} };
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${o.plural}.${group}` },
    spec: {
      group,
      names: { plural: o.plural, singular: o.kind.toLowerCase(), kind: o.kind, listKind: `${o.kind}List` },
      scope: o.scope,
      versions: [version],
    },
  };
}
