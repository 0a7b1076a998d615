#!/bin/bash
# make demo: starts tendril-agent on its embedded store inside a "node" network
# namespace, installs tendril-cni and a conflist in a demo directory, networks
# three labelled pods, shows them talking, enforces a NetworkPolicy on their
# traffic with the eBPF datapath (the drop in tendril monitor), load-balances
# a ClusterIP and a NodePort and masquerades pods leaving the cluster (to an
# "outside" namespace behind the node's own device); then two nodes on one
# etcd reach each other's pods through the VXLAN overlay (a capture shows the
# VNI carrying the source pod's identity); an agent following a (fake)
# Kubernetes API server that kubectl writes pods, a NetworkPolicy and a
# Service to; then tears everything down.
# The host's root namespace is never touched; every name has the tdl prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
TENDRIL="$REPO/bin/tendril"
NODE=tdldemonode
PODS=(tdldemo1 tdldemo2 tdldemo3)
# A host outside the cluster, reached through the node's own device.
OUTSIDE=tdldemoext
WORK=$(mktemp -d /tmp/tdl-demo.XXXXXX)
STATE="$WORK/state"
SOCK="$STATE/tendril.sock"
# The agent's pinned maps and links go under a bpffs directory of the demo's own.
BPFFS=/sys/fs/bpf/tdl-demo-$$
AGENT_PID=""
BG_PIDS=()

# The two-node part: a hub with etcd, two nodes, a pod on each.
CL_HUB=tdldemohub
CL_A=tdldemoa
CL_B=tdldemob
CL_NS=("$CL_HUB" "$CL_A" "$CL_B" "${CL_A}p" "${CL_B}p")
CL_PIDS=()
ETCD_PID=""

# The Kubernetes part: an agent following an API server. No API server runs on
# this machine: the project's fake (list/watch with resourceVersion, as the real
# one) stands in, run in the node's namespace, and kubectl talks to it.
K8S_NODE=tdldemok8s
K8S_PODS=(tdldemok1 tdldemok2)
K8S_AGENT_PID=""
FAKE_PID=""

cleanup() {
  for pid in "${BG_PIDS[@]}" "${CL_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null || true
  for pid in "${CL_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  [ -n "$ETCD_PID" ] && kill "$ETCD_PID" 2>/dev/null && wait "$ETCD_PID" 2>/dev/null || true
  [ -n "$K8S_AGENT_PID" ] && kill "$K8S_AGENT_PID" 2>/dev/null && wait "$K8S_AGENT_PID" 2>/dev/null || true
  [ -n "$FAKE_PID" ] && kill "$FAKE_PID" 2>/dev/null && wait "$FAKE_PID" 2>/dev/null || true
  for p in "${PODS[@]}" "$NODE" "$OUTSIDE" "${CL_NS[@]}" "$K8S_NODE" "${K8S_PODS[@]}"; do ip netns del "$p" 2>/dev/null || true; done
  rm -rf "$WORK" "$BPFFS" "$BPFFS-$CL_A" "$BPFFS-$CL_B" "$BPFFS-k8s"
}
trap cleanup EXIT
for p in "${PODS[@]}" "$NODE" "$OUTSIDE" "${CL_NS[@]}" "$K8S_NODE" "${K8S_PODS[@]}"; do ip netns del "$p" 2>/dev/null || true; done

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
in_node() { nsenter --net=/var/run/netns/$NODE -- "$@"; }

say "node namespace $NODE and three pod namespaces"
ip netns add "$NODE"
ip -n "$NODE" link set lo up
for p in "${PODS[@]}"; do ip netns add "$p"; done
say "an outside host ($OUTSIDE, 10.199.9.2) behind the node's device tdlext0 (10.199.9.1): the agent puts its NodePort and masquerade programs there"
ip netns add "$OUTSIDE"
ip link add tdlext0 netns "$NODE" type veth peer name eth0 netns "$OUTSIDE"
ip -n "$NODE" addr add 10.199.9.1/24 dev tdlext0
ip -n "$NODE" link set tdlext0 up
ip -n "$OUTSIDE" addr add 10.199.9.2/24 dev eth0
ip -n "$OUTSIDE" link set eth0 up
ip -n "$OUTSIDE" link set lo up
# Who answered and the address it saw: one line per TCP connection.
cat > "$WORK/hello.mjs" <<'JS'
import { createServer } from 'node:net';
const [name, port] = process.argv.slice(2);
createServer((s) => s.end(`hello from ${name}, you are ${s.remoteAddress?.replace(/^::ffff:/, '')}\n`)).listen(Number(port));
JS

say "tendril-agent on the embedded kvstore, host-scope IPAM 10.250.0.0/24, eBPF datapath (maps pinned under $BPFFS)"
start_agent() {
  # nsenter directly (not through a shell function) so $! is the agent itself.
  nsenter --net=/var/run/netns/$NODE -- "$REPO/bin/tendril-agent" --state-dir "$STATE" --lib-dir "$STATE/lib" --node-name demo-node \
    --pod-cidr 10.250.0.0/24 --bpffs-root "$BPFFS" --log-file "$WORK/agent.log" --prometheus-serve-addr 127.0.0.1:9962 &
  AGENT_PID=$!
  for _ in $(seq 100); do "$TENDRIL" status >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "agent did not start; log:"; cat "$WORK/agent.log"; return 1
}
export TENDRIL_SOCK="$SOCK"
start_agent
"$TENDRIL" status

say "tendril-cni is a native relay: VERSION exec'd 50 times, as a runtime does, against the reference bridge"
version_ms() {
  local t0 t1
  t0=$(date +%s%N)
  for _ in $(seq 50); do CNI_COMMAND=VERSION "$1" </dev/null >/dev/null; done
  t1=$(date +%s%N)
  awk -v d=$((t1 - t0)) 'BEGIN { printf "%.2f", d / 50 / 1e6 }'
}
echo "tendril-cni VERSION: $(version_ms "$REPO/bin/tendril-cni") ms per exec; bridge VERSION: $(version_ms /usr/lib/cni/bridge) ms per exec"

say "tendril-cni installed in a demo CNI dir, chained with the reference portmap and tuning"
mkdir -p "$WORK/bin" "$WORK/net.d"
ln -s "$REPO/bin/tendril-cni" "$WORK/bin/tendril-cni"
cat > "$WORK/net.d/10-tendril.conflist" <<CONF
{
  "cniVersion": "1.0.0",
  "name": "tendril",
  "plugins": [
    { "type": "tendril-cni", "socket": "$SOCK" },
    { "type": "portmap", "capabilities": { "portMappings": true }, "snat": true },
    { "type": "tuning", "sysctl": { "net.ipv4.conf.eth0.arp_notify": "1" } }
  ]
}
CONF
cat "$WORK/net.d/10-tendril.conflist"
export NETCONFPATH="$WORK/net.d" CNI_PATH="$WORK/bin:/usr/lib/cni"

declare -A IPS
APPS=(web web db)
for i in 0 1 2; do
  p=${PODS[$i]}
  say "ADD $p (app=${APPS[$i]}) through tendril cni (the libcni runtime)"
  out=$(CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=$p;TENDRIL_LABELS=app%3D${APPS[$i]}" \
    in_node "$TENDRIL" cni add tendril "/var/run/netns/$p" --cache-dir "$WORK/cache")
  echo "$out" | jq -c '{cniVersion, ips, interfaces: [.interfaces[].name]}'
  IPS[$p]=$(jq -r '.ips[0].address | split("/")[0]' <<<"$out")
done

# The agent's Prometheus metrics (--prometheus-serve-addr), as a scraper in the node sees them.
show_metrics() {
  in_node curl -s http://127.0.0.1:9962/metrics | grep -E '^tendril_(cni_operations_total|endpoint_state\{state="ready"\}|ipam_allocations)' || true
}
say "curl http://127.0.0.1:9962/metrics: the CNI operations and the endpoints, after the three ADDs"
show_metrics

say "tendril endpoint list"
"$TENDRIL" endpoint list
say "where the agent's ADD time went for endpoint 1 (ms per step; no process is spawned on ADD, DEL or CHECK)"
"$TENDRIL" endpoint get 1 -o json | jq -c '{id, state, policyRevision, creationTimings}'
say "tendril ipam list"
"$TENDRIL" ipam list

say "pod <-> pod"
for src in "${PODS[@]}"; do for dst in "${PODS[@]}"; do
  [ "$src" = "$dst" ] && continue
  nsenter --net=/var/run/netns/$src -- ping -c1 -W2 -q "${IPS[$dst]}" >/dev/null && echo "$src -> $dst (${IPS[$dst]}): ok"
done; done
say "pod <-> node"
nsenter --net=/var/run/netns/tdldemo1 -- ping -c1 -W2 -q 10.250.0.1 >/dev/null && echo "tdldemo1 -> node router 10.250.0.1: ok"
in_node ping -c1 -W2 -q "${IPS[tdldemo3]}" >/dev/null && echo "node -> tdldemo3 (${IPS[tdldemo3]}): ok"

DB=${IPS[tdldemo3]}
web_to_db_ping() { nsenter --net=/var/run/netns/tdldemo1 -- ping -c1 -W1 -q "$DB" >/dev/null 2>&1; }
web_to_db_tcp() { nsenter --net=/var/run/netns/tdldemo1 -- busybox nc -w 2 "$DB" 5432 </dev/null; }
show_enforcement() {
  if web_to_db_ping; then echo "tdldemo1 (web) -> db ping: allowed"; else echo "tdldemo1 (web) -> db ping: dropped"; fi
  echo "tdldemo1 (web) -> db TCP 5432: $(web_to_db_tcp || echo 'no answer')"
}

say "the eBPF datapath: programs on every pod's device, per-pod facts in maps"
"$TENDRIL" bpf endpoint list

say "a NetworkPolicy: db pods accept only web pods, and only on TCP 5432"
cat > "$WORK/policy.yaml" <<'YAML'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: db-from-web, namespace: demo }
spec:
  podSelector: { matchLabels: { app: db } }
  policyTypes: [Ingress]
  ingress:
    - from: [ { podSelector: { matchLabels: { app: web } } } ]
      ports: [ { protocol: TCP, port: 5432 } ]
YAML
cat "$WORK/policy.yaml"
# A tiny "database" in the db pod: answers each connection with the time.
nsenter --net=/var/run/netns/tdldemo3 -- busybox nc -ll -p 5432 -e /bin/date &
BG_PIDS+=($!)
"$TENDRIL" monitor --type drop --type policy-verdict >"$WORK/monitor.txt" 2>&1 &
MONITOR_PID=$!
BG_PIDS+=($MONITOR_PID)
sleep 0.3
echo "before: $(web_to_db_ping && echo 'web -> db ping allowed')"
"$TENDRIL" policy import "$WORK/policy.yaml"
show_enforcement
nsenter --net=/var/run/netns/tdldemo1 -- ping -c1 -W2 -q "${IPS[tdldemo2]}" >/dev/null && echo "tdldemo1 (web) -> tdldemo2 (web) ping: allowed (not selected by the policy)"
sleep 0.3
kill "$MONITOR_PID" 2>/dev/null || true
say "tendril monitor saw it, with the rule that decided"
cat "$WORK/monitor.txt"
say "tendril bpf policy get (db's entries in the policy map) and the datapath's counters"
DB_EP=$("$TENDRIL" endpoint list -o json | jq -r '.[] | select(.podName == "tdldemo3") | .id')
"$TENDRIL" bpf policy get "$DB_EP"
"$TENDRIL" bpf metrics

say "agent restart: policies come back from the kvstore and pods stay enforced while it is down"
kill "$AGENT_PID"; wait "$AGENT_PID" || true; AGENT_PID=""
echo "agent down:"
show_enforcement
nsenter --net=/var/run/netns/tdldemo1 -- ping -c1 -W2 -q "${IPS[tdldemo2]}" >/dev/null && echo "tdldemo1 -> tdldemo2 still ok"
start_agent
echo "agent restarted; endpoints restored from its state dir, policies from the kvstore:"
"$TENDRIL" endpoint list
"$TENDRIL" policy get -o json | jq -r '.policies[] | "restored: \(.name)"' 
show_enforcement

say "policy deleted: traffic restored"
"$TENDRIL" policy delete --all
web_to_db_ping && echo "tdldemo1 (web) -> db ping: allowed"

say "services: a ClusterIP load-balanced in eBPF over two backend pods (tdldemo2, tdldemo3 answer on TCP 8080)"
for p in tdldemo2 tdldemo3; do
  nsenter --net=/var/run/netns/$p -- node "$WORK/hello.mjs" "$p" 8080 &
  BG_PIDS+=($!)
done
nsenter --net=/var/run/netns/$OUTSIDE -- node "$WORK/hello.mjs" outside 9000 &
BG_PIDS+=($!)
sleep 0.5
"$TENDRIL" service upsert --id 1 --frontend 10.96.0.10:80 --backends "${IPS[tdldemo2]}:8080,${IPS[tdldemo3]}:8080"
echo "tdldemo1 -> 10.96.0.10:80, 8 new connections (each one pinned to its backend by conntrack):"
for _ in $(seq 8); do nsenter --net=/var/run/netns/tdldemo1 -- busybox nc -w 2 10.96.0.10 80 </dev/null; done | sort | uniq -c
echo "the node itself -> 10.96.0.10:80:"
in_node busybox nc -w 2 10.96.0.10 80 </dev/null
echo "a pod -> its own service (hairpin): tdldemo2 -> 10.96.0.11:80 backed only by itself:"
"$TENDRIL" service upsert --id 3 --frontend 10.96.0.11:80 --backends "${IPS[tdldemo2]}:8080" >/dev/null
nsenter --net=/var/run/netns/tdldemo2 -- busybox nc -w 2 10.96.0.11 80 </dev/null

say "NodePort 30080 with externalTrafficPolicy Local, from the outside host: the backend sees the client's own address"
"$TENDRIL" service upsert --id 2 --type NodePort --traffic-policy Local --frontend 0.0.0.0:30080 --backends "${IPS[tdldemo3]}:8080"
nsenter --net=/var/run/netns/$OUTSIDE -- busybox nc -w 2 10.199.9.1 30080 </dev/null

say "a ClusterIP answers no one outside the cluster: the outside host routes 10.96.0.0/12 via the node, is refused (CLUSTERIP_FROM_OUTSIDE); the NodePort still answers it"
ip -n "$OUTSIDE" route add 10.96.0.0/12 via 10.199.9.1
"$TENDRIL" monitor --type drop >"$WORK/monitor-clusterip.txt" 2>&1 &
CLUSTERIP_MONITOR=$!
BG_PIDS+=($CLUSTERIP_MONITOR)
# The monitor subscribes to the agent's event stream before the probe is sent.
sleep 0.8
echo "outside -> 10.96.0.10:80: $(nsenter --net=/var/run/netns/$OUTSIDE -- busybox nc -w 1 10.96.0.10 80 </dev/null 2>/dev/null || echo 'no answer')"
echo "outside -> NodePort 10.199.9.1:30080: $(nsenter --net=/var/run/netns/$OUTSIDE -- busybox nc -w 2 10.199.9.1 30080 </dev/null)"
sleep 0.3
kill "$CLUSTERIP_MONITOR" 2>/dev/null || true
grep -m1 CLUSTERIP_FROM_OUTSIDE "$WORK/monitor-clusterip.txt" || { echo "tendril monitor caught no drop; the counters:"; "$TENDRIL" bpf metrics | grep -E 'REASON|CLUSTERIP'; }

say "tendril bpf lb list: the frontends' slots, backends and reverse NAT as the datapath holds them"
"$TENDRIL" bpf lb list

say "pods leaving the cluster are masqueraded in eBPF (no nftables table): the outside server sees the node's address"
nsenter --net=/var/run/netns/tdldemo1 -- busybox nc -w 2 10.199.9.2 9000 </dev/null
in_node nft list table inet tendril >/dev/null 2>&1 && echo "an nft table tendril exists (unexpected)" || echo "nft: no tendril table"
"$TENDRIL" bpf nat list

say "many short connections from a pod to one outside address:port for 3 s (a native client, 2 threads): each port is taken again as soon as its connection is reset, so none is refused"
nsenter --net=/var/run/netns/$OUTSIDE -- "$REPO/build/bench/crr" server -t 1 -l 10.199.9.2:7000 >/dev/null &
BG_PIDS+=($!)
sleep 0.3
nsenter --net=/var/run/netns/tdldemo1 -- "$REPO/build/bench/crr" client -t 2 -d 3 -a 10.199.9.2:7000 |
  node -e 'const r = JSON.parse(require("fs").readFileSync(0, "utf8")); console.log(`${r.connections} connections, ${Math.round(r.connPerS)} per second, ${r.errorCount} errors, p99 ${r.latencyUs.p99} µs`)'
"$TENDRIL" bpf metrics | grep -E 'NAT_' || echo "tendril bpf metrics: no NAT drop (NAT_PORT_EXHAUSTED, NAT_FULL) counted"

say "a backend removed from the service: the datapath sees it is no longer a member and chooses again; new connections go to the one left"
"$TENDRIL" service upsert --id 1 --frontend 10.96.0.10:80 --backends "${IPS[tdldemo3]}:8080" >/dev/null
for _ in $(seq 3); do nsenter --net=/var/run/netns/tdldemo1 -- busybox nc -w 2 10.96.0.10 80 </dev/null; done | sort | uniq -c
for id in 1 2 3; do "$TENDRIL" service delete "$id" >/dev/null; done
"$TENDRIL" service list

say "CHECK, then DEL every pod"
for p in "${PODS[@]}"; do
  in_node "$TENDRIL" cni check tendril "/var/run/netns/$p" --cache-dir "$WORK/cache" && echo "$p: check ok"
done
for p in "${PODS[@]}"; do
  CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=$p" in_node "$TENDRIL" cni del tendril "/var/run/netns/$p" --cache-dir "$WORK/cache"
done
"$TENDRIL" endpoint list
"$TENDRIL" status
say "the metrics again: the DELs counted, no endpoint ready"
show_metrics

say "bad input: an interface name that is too long gives CNI error 4 and changes nothing"
CNI_IFNAME=this-is-too-long in_node "$TENDRIL" cni add tendril /var/run/netns/tdldemo1 --cache-dir "$WORK/cache" || echo "exit code $?"
say "the node's own namespace as a pod's netns is refused with CNI error 4; the node's links are untouched"
in_node "$TENDRIL" cni add tendril /var/run/netns/$NODE --cache-dir "$WORK/cache" || echo "exit code $?"
ip -n "$NODE" -br link show lo
say "a pod may not claim a reserved identity: TENDRIL_LABELS=reserved:host is refused with CNI error 7"
CNI_ARGS="IgnoreUnknown=1;TENDRIL_LABELS=reserved:host" in_node "$TENDRIL" cni add tendril /var/run/netns/tdldemo1 --cache-dir "$WORK/cache" || echo "exit code $?"
say "a second agent on this node stops before touching anything"
in_node "$REPO/bin/tendril-agent" --state-dir "$WORK/second" --lib-dir "$WORK/second/lib" --node-name demo-node-2 --pod-cidr 10.251.0.0/24 || echo "exit code $?"

say "Kubernetes: an agent following an API server (a fake one on loopback: no API server runs on this machine) that kubectl writes to"
ip netns add "$K8S_NODE"
ip -n "$K8S_NODE" link set lo up
for p in "${K8S_PODS[@]}"; do ip netns add "$p"; done
in_k8s() { nsenter --net=/var/run/netns/$K8S_NODE -- "$@"; }
coproc FAKE { in_k8s node "$REPO/dist/bench/k8sFakeApiWorker.js" '{"crds":"tendril"}'; }
FAKE_PID=$FAKE_PID
read -r _ <&"${FAKE[0]}"
echo '{"id":1,"op":"kubeconfig"}' >&"${FAKE[1]}"
read -r reply <&"${FAKE[0]}"
export KUBECONFIG
KUBECONFIG=$(jq -r .path <<<"$reply")
kube() { in_k8s kubectl "$@"; }
kube apply --validate=false -f - <<'YAML'
apiVersion: v1
kind: Namespace
metadata: { name: shop, labels: { team: shop } }
---
apiVersion: v1
kind: Node
metadata: { name: demo-k8s }
spec: { podCIDRs: [10.252.0.0/24] }
status: { addresses: [ { type: InternalIP, address: 10.252.9.1 } ] }
---
apiVersion: v1
kind: Pod
metadata: { name: web, namespace: shop, labels: { app: web } }
spec: { nodeName: demo-k8s, containers: [ { name: web, image: busybox } ] }
---
apiVersion: v1
kind: Pod
metadata: { name: db, namespace: shop, labels: { app: db } }
spec: { nodeName: demo-k8s, containers: [ { name: db, image: busybox } ] }
YAML
K8S_STATE="$WORK/k8s"
K8S_SOCK="$K8S_STATE/tendril.sock"
echo "tendril-agent --k8s-kubeconfig \$KUBECONFIG --ipam kubernetes (the pod CIDR comes from the Node object)"
in_k8s "$REPO/bin/tendril-agent" --state-dir "$K8S_STATE" --lib-dir "$K8S_STATE/lib" --node-name demo-k8s \
  --k8s-kubeconfig "$KUBECONFIG" --ipam kubernetes --bpffs-root "$BPFFS-k8s" --log-file "$WORK/k8s-agent.log" &
K8S_AGENT_PID=$!
for _ in $(seq 150); do TENDRIL_SOCK=$K8S_SOCK "$TENDRIL" status >/dev/null 2>&1 && break; sleep 0.1; done
TENDRIL_SOCK=$K8S_SOCK "$TENDRIL" status
mkdir -p "$WORK/k8s-net.d"
printf '{"cniVersion":"1.0.0","name":"tendril","plugins":[{"type":"tendril-cni","socket":"%s"}]}\n' "$K8S_SOCK" >"$WORK/k8s-net.d/10-tendril.conflist"
declare -A K8S_IPS
K8S_NAMES=(web db)
for i in 0 1; do
  out=$(NETCONFPATH="$WORK/k8s-net.d" CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=${K8S_NAMES[$i]}" \
    in_k8s "$TENDRIL" cni add tendril "/var/run/netns/${K8S_PODS[$i]}" --cache-dir "$WORK/k8s-cache")
  K8S_IPS[${K8S_NAMES[$i]}]=$(jq -r '.ips[0].address | split("/")[0]' <<<"$out")
done
echo "ADD with only kubelet's CNI_ARGS (K8S_POD_NAMESPACE, K8S_POD_NAME): the labels come from the API server"
TENDRIL_SOCK=$K8S_SOCK "$TENDRIL" endpoint list
nsenter --net=/var/run/netns/tdldemok2 -- busybox nc -ll -p 5432 -e /bin/date &
BG_PIDS+=($!)
sleep 0.3
k8s_web_to_db() { nsenter --net=/var/run/netns/tdldemok1 -- busybox nc -w 1 "${K8S_IPS[db]}" 5432 </dev/null || echo "no answer"; }
echo "web -> db TCP 5432: $(k8s_web_to_db)"
say "kubectl apply: a NetworkPolicy letting only app=api into app=db"
TENDRIL_SOCK=$K8S_SOCK "$TENDRIL" monitor --type drop >"$WORK/k8s-monitor.txt" 2>&1 &
K8S_MON=$!
BG_PIDS+=($K8S_MON)
kube apply --validate=false -f - <<'YAML'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: db-from-api, namespace: shop }
spec:
  podSelector: { matchLabels: { app: db } }
  policyTypes: [Ingress]
  ingress: [ { from: [ { podSelector: { matchLabels: { app: api } } } ], ports: [ { protocol: TCP, port: 5432 } ] } ]
YAML
sleep 0.3
echo "web -> db TCP 5432: $(k8s_web_to_db)"
sleep 0.2
kill "$K8S_MON" 2>/dev/null || true
echo "tendril monitor:"; head -3 "$WORK/k8s-monitor.txt"
say "kubectl label pod web app=api: the pod's identity changes, and the policy lets it in"
kube -n shop label pod web app=api --overwrite
sleep 0.3
TENDRIL_SOCK=$K8S_SOCK "$TENDRIL" endpoint list
echo "web -> db TCP 5432: $(k8s_web_to_db)"
say "kubectl apply: a Service with an EndpointSlice becomes a ClusterIP load-balanced in eBPF"
kube apply --validate=false -f - <<YAML
apiVersion: v1
kind: Service
metadata: { name: db, namespace: shop }
spec: { clusterIP: 10.96.50.5, ports: [ { name: pg, port: 5432, protocol: TCP } ] }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: db-1, namespace: shop, labels: { kubernetes.io/service-name: db } }
addressType: IPv4
ports: [ { name: pg, port: 5432, protocol: TCP } ]
endpoints: [ { addresses: [ "${K8S_IPS[db]}" ], conditions: { ready: true } } ]
YAML
sleep 0.3
TENDRIL_SOCK=$K8S_SOCK "$TENDRIL" service list
echo "web -> 10.96.50.5:5432: $(nsenter --net=/var/run/netns/tdldemok1 -- busybox nc -w 1 10.96.50.5 5432 </dev/null || echo 'no answer')"
TENDRIL_SOCK=$K8S_SOCK "$TENDRIL" status
kill "$K8S_AGENT_PID"; wait "$K8S_AGENT_PID" 2>/dev/null || true; K8S_AGENT_PID=""

say "two nodes on one etcd: a hub namespace with a bridge and etcd, nodes $CL_A and $CL_B on it (10.198.0.11, .12)"
ip netns add "$CL_HUB"
ip -n "$CL_HUB" link set lo up
# A fixed MAC: a bridge without one takes its lowest port MAC, which changes as ports join.
ip -n "$CL_HUB" link add tdlhub0 address 02:74:64:6c:00:01 type bridge
ip -n "$CL_HUB" addr add 10.198.0.1/24 dev tdlhub0
ip -n "$CL_HUB" link set tdlhub0 up
nsenter --net=/var/run/netns/$CL_HUB -- etcd --name tdl-demo --data-dir "$WORK/etcd" \
  --listen-client-urls http://10.198.0.1:2379 --advertise-client-urls http://10.198.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster tdl-demo=http://127.0.0.1:2380 >"$WORK/etcd.log" 2>&1 &
ETCD_PID=$!
declare -A CL_SOCK CL_POD_IP CL_APP=([$CL_A]=client [$CL_B]=server)
i=0
for n in "$CL_A" "$CL_B"; do
  i=$((i + 1))
  ip netns add "$n"
  ip -n "$n" link set lo up
  ip -n "$CL_HUB" link add "tdlport$i" type veth peer name eth0 netns "$n"
  ip -n "$CL_HUB" link set "tdlport$i" master tdlhub0 up
  ip -n "$n" addr add "10.198.0.1$i/24" dev eth0
  ip -n "$n" link set eth0 up
  ip netns add "${n}p"
done
for _ in $(seq 300); do grep -q 'ready to serve client requests' "$WORK/etcd.log" && break; sleep 0.1; done
grep -q 'ready to serve client requests' "$WORK/etcd.log" || { echo "etcd did not start; log:"; tail -20 "$WORK/etcd.log"; exit 1; }
i=0
for n in "$CL_A" "$CL_B"; do
  i=$((i + 1))
  CL_SOCK[$n]="$WORK/$n/tendril.sock"
  nsenter --net=/var/run/netns/$n -- "$REPO/bin/tendril-agent" --state-dir "$WORK/$n" --lib-dir "$WORK/$n/lib" --node-name "$n" \
    --kvstore etcd --kvstore-opt etcd.endpoints=http://10.198.0.1:2379 --ipam block --pool-cidr 10.197.0.0/16 \
    --routing-mode tunnel --node-ip "10.198.0.1$i" --bpffs-root "$BPFFS-$n" --log-file "$WORK/$n.log" &
  CL_PIDS+=($!)
done
for n in "$CL_A" "$CL_B"; do
  for _ in $(seq 100); do TENDRIL_SOCK=${CL_SOCK[$n]} "$TENDRIL" status >/dev/null 2>&1 && break; sleep 0.1; done
  mkdir -p "$WORK/$n/net.d"
  printf '{"cniVersion":"1.0.0","name":"tendril","plugins":[{"type":"tendril-cni","socket":"%s"}]}\n' "${CL_SOCK[$n]}" >"$WORK/$n/net.d/10-tendril.conflist"
  out=$(NETCONFPATH="$WORK/$n/net.d" CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=${n}p;TENDRIL_LABELS=app%3D${CL_APP[$n]}" \
    nsenter --net=/var/run/netns/$n -- "$TENDRIL" cni add tendril "/var/run/netns/${n}p" --cache-dir "$WORK/$n/cache")
  CL_POD_IP[$n]=$(jq -r '.ips[0].address | split("/")[0]' <<<"$out")
  echo "pod ${n}p (app=${CL_APP[$n]}) on $n: ${CL_POD_IP[$n]}, identity $(TENDRIL_SOCK=${CL_SOCK[$n]} "$TENDRIL" endpoint list -o json | jq -r '.[0].identity')"
done
say "tendril node list (on $CL_A): each node's addresses and pod CIDRs, from the registry in etcd"
for _ in $(seq 100); do [ "$(TENDRIL_SOCK=${CL_SOCK[$CL_A]} "$TENDRIL" node list -o json | jq '[.[] | select(.local or .routesInstalled)] | length')" = 2 ] && break; sleep 0.1; done
TENDRIL_SOCK=${CL_SOCK[$CL_A]} "$TENDRIL" node list
say "pod on $CL_A -> pod on $CL_B through the VXLAN overlay (tendril_vxlan, UDP 8472); a capture on the underlay"
nsenter --net=/var/run/netns/$CL_B -- timeout 5 tcpdump -n -l -T vxlan -i eth0 -c 2 udp port 8472 2>/dev/null >"$WORK/capture.txt" &
CAPTURE_PID=$!
sleep 0.5
nsenter --net=/var/run/netns/${CL_A}p -- ping -c3 -W2 "${CL_POD_IP[$CL_B]}" | tail -2
wait "$CAPTURE_PID" || true
cat "$WORK/capture.txt"
echo "each packet's VNI is its source pod's security identity: the receiving node enforces policy on it, not on the inner source address"
say "$CL_B's ipcache in eBPF: the remote pod and node with their tunnel endpoint"
TENDRIL_SOCK=${CL_SOCK[$CL_B]} "$TENDRIL" bpf ipcache list | grep -E "PREFIX|${CL_POD_IP[$CL_A]}|10\.198\.0\.11" || true

say "done; cleaning up"
