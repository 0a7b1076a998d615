import { CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import { K8sCrdMissingError } from './errors.js';
import { httpStatusOf } from './resourceInformer.js';

/**
 * Fails at once with K8sCrdMissingError when the API server answers 404 for
 * a cluster-scoped custom resource (its CRD not installed), instead of an
 * informer waiting out the sync timeout for something that will not come.
 * Any other failure (the server unreachable) is left to the informer's
 * retries: only a 404 is an answer. A server that does not answer within
 * `waitMs` is left to them too.
 */
export async function requireServedResource(kubeConfig: KubeConfig, c: { group: string; version: string; plural: string }, waitMs = 5000): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), waitMs);
  });
  try {
    const listed = kubeConfig.makeApiClient(CustomObjectsApi).listClusterCustomObject({ ...c, limit: 1 });
    // A late answer after giving up is of no interest (the informer lists on its own).
    listed.catch(() => undefined);
    await Promise.race([listed, gaveUp]);
  } catch (err) {
    if (httpStatusOf(err) === 404) throw new K8sCrdMissingError(`${c.plural}.${c.group}`, `GET /apis/${c.group}/${c.version}/${c.plural} answered 404`);
  } finally {
    clearTimeout(timer);
  }
}
