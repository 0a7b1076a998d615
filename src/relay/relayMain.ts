/**
 * What `tendril relay` runs: its options checked and read (RelayConfigError
 * for a bad one, before anything is opened), the peer source (static
 * --peer list, the kvstore's node registry, or the TendrilNodes of the
 * Kubernetes API), the relay listening, then until SIGINT/SIGTERM.
 */
import { FLOW_UI_ROUTES } from '../flowui/index.js';
import { readFileSync } from 'node:fs';
import { checkListenOptions, listenFlags, readListenAccess } from '../api/server/listenAccess.js';
import { fileErrorReason } from '../errors/fileError.js';
import type { Logger } from '../logging/logger.js';
import { RelayConfigError } from './errors.js';
import { parsePeer, type PeerSource, RegistryPeers, StaticPeers } from './peers.js';
import { Relay } from './relay.js';
import type { PeerClientOptions } from './relaySession.js';

export interface RelayCliOptions {
  listenAddr: string;
  tokenFile?: string;
  tlsCert?: string;
  tlsKey?: string;
  tlsClientCa?: string;
  peer?: string[];
  kvstore?: string;
  kvstoreOpt?: string[];
  k8sKubeconfig?: string;
  k8sApiServer?: string;
  k8sNamespace?: string;
  peerTokenFile?: string;
  peerTlsCa?: string;
  peerTlsCert?: string;
  peerTlsKey?: string;
  reorderWindow?: string;
  historyTimeout?: string;
}

export const RELAY_LISTEN_FLAGS = listenFlags('--');
/** The reorder window's default: long enough for nodes' flows of one connection to meet, short enough to read live. */
export const DEFAULT_REORDER_WINDOW_MS = 300;
export const DEFAULT_HISTORY_TIMEOUT_MS = 10_000;

function milliseconds(flag: string, text: string | undefined, dflt: number, min: number, max: number): number {
  if (text === undefined) return dflt;
  if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) throw new RelayConfigError(`${flag} must be a number of milliseconds from ${min} to ${max}, got "${text}"`);
  return Number(text);
}

function readFile(flag: string, path: string | undefined): Buffer | undefined {
  if (path === undefined) return undefined;
  try {
    return readFileSync(path);
  } catch (err) {
    throw new RelayConfigError(`${flag}: cannot read ${path}: ${fileErrorReason(err)}`, undefined, { cause: err });
  }
}

/** How the relay reaches the nodes, from the --peer-* options. */
export function peerClientOptions(o: RelayCliOptions): PeerClientOptions {
  if ((o.peerTlsCert === undefined) !== (o.peerTlsKey === undefined)) throw new RelayConfigError('--peer-tls-cert and --peer-tls-key go together: give both or neither');
  const token = readFile('--peer-token-file', o.peerTokenFile)?.toString('utf8').trim();
  if (token === '') throw new RelayConfigError(`--peer-token-file: ${o.peerTokenFile} holds no token`);
  const ca = readFile('--peer-tls-ca', o.peerTlsCa);
  const cert = readFile('--peer-tls-cert', o.peerTlsCert);
  const key = readFile('--peer-tls-key', o.peerTlsKey);
  const reorderWindowMs = milliseconds('--reorder-window', o.reorderWindow, DEFAULT_REORDER_WINDOW_MS, 0, 10_000);
  return {
    ...(token !== undefined ? { token } : {}),
    ...(ca ? { ca } : {}),
    ...(cert && key ? { cert, key } : {}),
    connectTimeoutMs: 5000,
    historyTimeoutMs: milliseconds('--history-timeout', o.historyTimeout, DEFAULT_HISTORY_TIMEOUT_MS, 100, 600_000),
    reorderWindowMs,
    retry: { initialMs: 500, maxMs: 10_000 },
  };
}

/** The peer source the options name: exactly one of --peer, --kvstore etcd, --k8s-*. */
export async function peerSource(o: RelayCliOptions, log: Logger): Promise<PeerSource> {
  const k8s = o.k8sKubeconfig !== undefined || o.k8sApiServer !== undefined;
  const sources = [(o.peer?.length ?? 0) > 0 && '--peer', o.kvstore !== undefined && '--kvstore', k8s && '--k8s-kubeconfig/--k8s-api-server'].filter((s) => s !== false);
  if (sources.length !== 1) {
    throw new RelayConfigError(
      sources.length === 0
        ? 'name the nodes: --peer name=url (repeatable), --kvstore etcd --kvstore-opt etcd.endpoints=… (the agents\' node registry), or --k8s-kubeconfig/--k8s-api-server (their TendrilNodes)'
        : `${sources.join(' and ')}: give one way to find the nodes`,
    );
  }
  if ((o.peer?.length ?? 0) > 0) return new StaticPeers(o.peer!.map(parsePeer));
  if (o.kvstore !== undefined) {
    if (o.kvstore !== 'etcd') throw new RelayConfigError(`--kvstore ${o.kvstore}: the relay reads the cluster's node registry, which only etcd shares between nodes (use --kvstore etcd)`);
    const [{ openBackend, parseKvstoreOpts }, { NodeRegistry }] = await Promise.all([import('../kvstore/factory.js'), import('../node/nodeRegistry.js')]);
    const backend = await openBackend({ kind: 'etcd', options: parseKvstoreOpts(o.kvstoreOpt ?? []), dataDir: '/nonexistent', logger: log.child({ subsys: 'kvstore' }) });
    const registry = new NodeRegistry({ backend, nodeName: 'tendril-relay', logger: log.child({ subsys: 'nodes' }) });
    return new RegistryPeers({
      follow: () => registry.follow(),
      list: () => registry.list(),
      get: (n) => registry.get(n),
      subscribe: (l) => registry.subscribe(l),
      stop: async () => {
        await registry.stop();
        await backend.close();
      },
    });
  }
  const [{ loadKubeConfig }, { KubernetesNodeRegistry }] = await Promise.all([import('../k8s/kubeConfig.js'), import('../k8s/kubernetesNodeRegistry.js')]);
  const kubeConfig = loadKubeConfig({ ...(o.k8sKubeconfig !== undefined ? { kubeconfig: o.k8sKubeconfig } : {}), ...(o.k8sApiServer !== undefined ? { apiServer: o.k8sApiServer } : {}) });
  return new RegistryPeers(new KubernetesNodeRegistry({ kubeConfig, nodeName: 'tendril-relay', namespace: o.k8sNamespace ?? 'kube-system', logger: log.child({ subsys: 'nodes' }) }));
}

/** Starts the relay; resolves with it listening (the caller stops it). */
export async function startRelay(o: RelayCliOptions, log: Logger): Promise<Relay> {
  const files = {
    ...(o.tokenFile !== undefined ? { tokenFile: o.tokenFile } : {}),
    ...(o.tlsCert !== undefined ? { tlsCert: o.tlsCert } : {}),
    ...(o.tlsKey !== undefined ? { tlsKey: o.tlsKey } : {}),
    ...(o.tlsClientCa !== undefined ? { tlsClientCa: o.tlsClientCa } : {}),
  };
  const listen = checkListenOptions(o.listenAddr, files, RELAY_LISTEN_FLAGS);
  const access = readListenAccess(files, RELAY_LISTEN_FLAGS);
  const client = peerClientOptions(o);
  const peers = await peerSource(o, log);
  return Relay.start({ listen, access, peers, client, log, listenFlag: RELAY_LISTEN_FLAGS.listen, ...FLOW_UI_ROUTES });
}
