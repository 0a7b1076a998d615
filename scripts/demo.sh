#!/bin/bash
# make demo: starts tendril-agent on its embedded store inside a "node" network
# namespace, installs tendril-cni and a conflist in a demo directory, networks
# three labelled dual-stack pods (one ADD repeated: the pod keeps its addresses), shows them talking over IPv4
# and IPv6, enforces a NetworkPolicy on their
# traffic with the eBPF datapath (the drop in tendril monitor), load-balances
# a ClusterIP (and an IPv6 one) and a NodePort and masquerades pods leaving the cluster (to an
# "outside" namespace behind the node's own device); then two nodes on one
# etcd reach each other's pods through the VXLAN overlay (a capture shows the
# VNI carrying the source pod's identity); an agent following a (fake)
# Kubernetes API server that kubectl writes pods, a NetworkPolicy and a
# Service to; then tears everything down.
# The host's root namespace is never touched; every name has the tdl prefix.
# Every claim it prints is checked ("✓"), and a claim that does not hold fails
# the demo ("demo: FAILED: …", exit 1). On every exit (success, a failed check,
# Ctrl-C) it stops every process it started and removes what it made
# (scripts/demo-lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
# shellcheck source=scripts/demo-lib.sh
source "$REPO/scripts/demo-lib.sh"
TENDRIL="$REPO/bin/tendril"
NODE=tdldemonode
PODS=(tdldemo1 tdldemo2 tdldemo3)
# A host outside the cluster, reached through the node's own device.
OUTSIDE=tdldemoext
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tdl-demo.XXXXXX")
STATE="$WORK/state"
SOCK="$STATE/tendril.sock"
# The agent's pinned maps and links go under a bpffs directory of the demo's own.
BPFFS=/sys/fs/bpf/tdl-demo-$$

# The two-node part: a hub with etcd, two nodes, a pod on each.
CL_HUB=tdldemohub
CL_A=tdldemoa
CL_B=tdldemob
CL_NS=("$CL_HUB" "$CL_A" "$CL_B" "${CL_A}p" "${CL_B}p")

# The Kubernetes part: an agent following an API server. No API server runs on
# this machine: the project's fake (list/watch with resourceVersion, as the real
# one) stands in, run in the node's namespace, and kubectl talks to it.
K8S_NODE=tdldemok8s
K8S_PODS=(tdldemok1 tdldemok2)
ALL_NS=("${PODS[@]}" "$NODE" "$OUTSIDE" "${CL_NS[@]}" "$K8S_NODE" "${K8S_PODS[@]}")

# Called by demo_exit once every process of the run has stopped (a namespace a
# process still holds would outlive its name, with its links and nft tables).
demo_cleanup_resources() {
  local p left=()
  for p in "${ALL_NS[@]}"; do ip netns del "$p" 2>/dev/null || true; done
  rm -rf "$WORK" "$BPFFS" "$BPFFS-$CL_A" "$BPFFS-$CL_B" "$BPFFS-k8s"
  for p in "${ALL_NS[@]}"; do [ -e "/var/run/netns/$p" ] && left+=("netns $p"); done
  for p in "$WORK" "$BPFFS" "$BPFFS-$CL_A" "$BPFFS-$CL_B" "$BPFFS-k8s"; do [ -e "$p" ] && left+=("$p"); done
  if grep -qF -e "$WORK" -e "$BPFFS" /proc/self/mountinfo; then left+=("a mount under $WORK or $BPFFS"); fi
  if [ ${#left[@]} -gt 0 ]; then echo "demo: cleanup left: ${left[*]}" >&2; return 1; fi
  echo "demo: cleaned up: no process of the demo runs; its namespaces, pins and files are removed"
}
demo_init "$WORK"
# Temporary files of what the demo runs (the fake API server's kubeconfig) go under its work dir too.
export TMPDIR="$WORK/tmp"
mkdir -p "$TMPDIR"
for p in "${ALL_NS[@]}"; do ip netns del "$p" 2>/dev/null || true; done

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
# hello NAMESPACE NAME PORT: that server, in that namespace, as a demo job.
hello() { demo_bg "hello-$1-$3" nsenter --net="/var/run/netns/$1" -- node "$WORK/hello.mjs" "$2" "$3"; }
# tcp NAMESPACE ADDR PORT: one connection, what the server said (no output, exit 1: no answer).
tcp() { nsenter --net="/var/run/netns/$1" -- busybox nc -w 2 "$2" "$3" </dev/null 2>/dev/null | grep .; }
# pings NAMESPACE ADDR: an echo reply comes back (a second try if the first is lost).
pings() { nsenter --net="/var/run/netns/$1" -- ping -c1 -W2 -q "$2" >/dev/null 2>&1 || nsenter --net="/var/run/netns/$1" -- ping -c1 -W2 -q "$2" >/dev/null 2>&1; }
# no_ping NAMESPACE ADDR: no echo reply within a second.
no_ping() { ! nsenter --net="/var/run/netns/$1" -- ping -c1 -W1 -q "$2" >/dev/null 2>&1; }
# no_tcp NAMESPACE ADDR PORT: a connection gets no answer within a second.
# (grep reads all of nc's output: with -q it could exit first, and nc's SIGPIPE would read as "no answer".)
no_tcp() { ! nsenter --net="/var/run/netns/$1" -- busybox nc -w 1 "$2" "$3" </dev/null 2>/dev/null | grep . >/dev/null; }
# quietly CMD...: CMD with its output discarded (only its status counts).
quietly() { "$@" >/dev/null 2>&1; }
# count_of SOCKET ARGS...: how many items `tendril ARGS -o json` lists.
count_of() { TENDRIL_SOCK=$1 "$TENDRIL" "${@:2}" -o json | jq length; }
# wait_line FILE REGEX [SECONDS]: FILE gets a line matching REGEX.
wait_line() {
  local _
  for _ in $(seq $((${3:-5} * 10))); do grep -qE -- "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
# monitor JOB FILE ARGS...: tendril monitor ARGS into FILE, as a demo job; returns once it listens.
monitor() {
  demo_bg "$1" "$TENDRIL" monitor "${@:3}" >"$2" 2>&1
  wait_line "$2" 'Listening for events' || demo_fail "tendril monitor ${*:3} did not start: $(cat "$2")"
}

say "tendril-agent on the embedded kvstore, host-scope IPAM 10.250.0.0/24 and fd00:250::/112 (dual-stack), eBPF datapath (maps pinned under $BPFFS)"
start_agent() {
  demo_bg agent nsenter --net=/var/run/netns/$NODE -- "$REPO/bin/tendril-agent" --state-dir "$STATE" --lib-dir "$STATE/lib" --node-name demo-node \
    --pod-cidr 10.250.0.0/24,fd00:250::/112 --bpffs-root "$BPFFS" --log-file "$WORK/agent.log" --prometheus-serve-addr 127.0.0.1:9962
  for _ in $(seq 100); do "$TENDRIL" status >/dev/null 2>&1 && break; sleep 0.1; done
  "$TENDRIL" status >/dev/null 2>&1 || { echo "the agent's log:"; tail -20 "$WORK/agent.log"; }
  check_output "the agent answers on $SOCK" '^Agent +ok' "$TENDRIL" status
}
export TENDRIL_SOCK="$SOCK"
start_agent

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

declare -A IPS IPS6
APPS=(web web db)
for i in 0 1 2; do
  p=${PODS[$i]}
  say "ADD $p (app=${APPS[$i]}) through tendril cni (the libcni runtime)"
  out=$(CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=$p;TENDRIL_LABELS=app%3D${APPS[$i]}" \
    in_node "$TENDRIL" cni add tendril "/var/run/netns/$p" --cache-dir "$WORK/cache")
  echo "$out" | jq -c '{cniVersion, ips, interfaces: [.interfaces[].name]}'
  IPS[$p]=$(jq -r '.ips[0].address | split("/")[0]' <<<"$out")
  IPS6[$p]=$(jq -r '.ips[1].address | split("/")[0]' <<<"$out")
  check "$p has ${IPS[$p]} and ${IPS6[$p]}, one from each pod CIDR" grep -qE '^10\.250\.0\.[0-9]+ fd00:250::[0-9a-f]+$' <<<"${IPS[$p]} ${IPS6[$p]}"
done


# The agent's Prometheus metrics (--prometheus-serve-addr), as a scraper in the node sees them.
metrics() { in_node curl -sf http://127.0.0.1:9962/metrics | grep -E '^tendril_(cni_operations_total|endpoint_state\{state="ready"\}|ipam_allocations)'; }
# metrics_have LINE...: the metrics (printed) have every one of these lines.
metrics_have() {
  local m l
  m=$(metrics) || return 1
  printf '%s\n' "$m"
  for l in "$@"; do grep -qxF -- "$l" <<<"$m" || return 1; done
}
say "curl http://127.0.0.1:9962/metrics: the CNI operations and the endpoints, after the three ADDs"
check "3 ADDs counted as successes, 3 endpoints ready" metrics_have \
  'tendril_cni_operations_total{verb="ADD",result="success"} 3' 'tendril_endpoint_state{state="ready"} 3'

# eth0's MAC in pod namespace $1.
pod_mac() { ip -n "$1" -br link show eth0 | awk '{ print $3 }'; }
say "ADD tdldemo1 again, as a runtime retrying does: the running pod's existing result comes back, nothing changes"
MAC1=$(pod_mac tdldemo1)
out=$(CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=tdldemo1;TENDRIL_LABELS=app%3Dweb" \
  in_node "$TENDRIL" cni add tendril /var/run/netns/tdldemo1 --cache-dir "$WORK/cache")
echo "$out" | jq -c '{ips: [.ips[].address]}'
check "tdldemo1 keeps ${IPS[tdldemo1]}" test "$(jq -r '.ips[0].address | split("/")[0]' <<<"$out")" = "${IPS[tdldemo1]}"
check "tdldemo1's eth0 keeps its MAC $MAC1" test "$(pod_mac tdldemo1)" = "$MAC1"
check "still 3 endpoints and the same 4 addresses allocated (3 pods and the router)" metrics_have \
  'tendril_endpoint_state{state="ready"} 3' 'tendril_ipam_allocations{pool="10.250.0.0/24",family="ipv4"} 4' \
  'tendril_ipam_allocations{pool="fd00:250::/112",family="ipv6"} 4'

say "tendril endpoint list"
"$TENDRIL" endpoint list
check "3 endpoints, all ready" test "$("$TENDRIL" endpoint list -o json | jq '[.[] | select(.state == "ready")] | length')" = 3
say "where the agent's ADD time went for endpoint 1 (ms per step; no process is spawned on ADD, DEL or CHECK)"
"$TENDRIL" endpoint get 1 -o json | jq -c '{id, state, policyRevision, creationTimings}'
say "tendril ipam list"
"$TENDRIL" ipam list

say "pod <-> pod"
for src in "${PODS[@]}"; do for dst in "${PODS[@]}"; do
  [ "$src" = "$dst" ] && continue
  check "$src -> $dst (${IPS[$dst]}) ping" pings "$src" "${IPS[$dst]}"
done; done
say "pod <-> pod over IPv6 (neighbour discovery answered by the eBPF datapath, as ARP is)"
for dst in tdldemo2 tdldemo3; do
  check "tdldemo1 -> $dst (${IPS6[$dst]}) ping" pings tdldemo1 "${IPS6[$dst]}"
done
say "pod <-> node"
check "tdldemo1 -> node router 10.250.0.1 ping" pings tdldemo1 10.250.0.1
check "node -> tdldemo3 (${IPS[tdldemo3]}) ping" pings "$NODE" "${IPS[tdldemo3]}"
check "node -> tdldemo3 over IPv6 (${IPS6[tdldemo3]}) ping" pings "$NODE" "${IPS6[tdldemo3]}"

DB=${IPS[tdldemo3]}
DB6=${IPS6[tdldemo3]}
show_enforcement() {
  check "tdldemo1 (web) -> db ping: dropped" no_ping tdldemo1 "$DB"
  check_output "tdldemo1 (web) -> db TCP 5432: answered" '^hello from db, you are ' tcp tdldemo1 "$DB" 5432
  check "tdldemo1 (web) -> db over IPv6 ($DB6) ping: dropped, the same policy" no_ping tdldemo1 "$DB6"
  check_output "tdldemo1 (web) -> db over IPv6 TCP 5432: answered" "^hello from db, you are ${IPS6[tdldemo1]}\$" tcp tdldemo1 "$DB6" 5432
}

say "the eBPF datapath: programs on every pod's device, per-pod facts in maps"
"$TENDRIL" bpf endpoint list
check "each of the 3 pods is in the datapath's endpoint map, under both its addresses" test "$("$TENDRIL" bpf endpoint list -o json | jq length)" = 6

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
# A tiny "database" in the db pod: says who it is to each connection.
hello tdldemo3 db 5432
monitor monitor-policy "$WORK/monitor.txt" --type drop --type policy-verdict
check "before the policy: tdldemo1 (web) -> db ping allowed" pings tdldemo1 "$DB"
"$TENDRIL" policy import "$WORK/policy.yaml"
show_enforcement
check "tdldemo1 (web) -> tdldemo2 (web) ping: allowed (not selected by the policy)" pings tdldemo1 "${IPS[tdldemo2]}"
say "tendril monitor saw it, with the rule that decided"
check "tendril monitor: the ping dropped by the default deny of NetworkPolicy/demo/db-from-web" \
  wait_line "$WORK/monitor.txt" '^[0-9:.]+ DROP \(POLICY.*default deny set by NetworkPolicy/demo/db-from-web'
check "tendril monitor: TCP 5432 allowed by NetworkPolicy/demo/db-from-web spec.ingress[0]" \
  wait_line "$WORK/monitor.txt" 'POLICY-VERDICT ALLOWED .*:5432 .*rule: NetworkPolicy/demo/db-from-web spec\.ingress\[0\]'
demo_kill monitor-policy
grep -v '^Listening for events' "$WORK/monitor.txt"
say "tendril observe: the same drop after the fact, from the agent's flow history (nobody had to be listening)"
check_output "tendril observe --to-pod demo/tdldemo3 --verdict dropped: the ping, dropped by the default deny of NetworkPolicy/demo/db-from-web" \
  'demo/tdldemo1 \(ID:[0-9]+\) -> demo/tdldemo3 \(ID:[0-9]+\) drop \(POLICY\) ingress DROPPED icmp.*default deny set by NetworkPolicy/demo/db-from-web' \
  "$TENDRIL" observe --to-pod demo/tdldemo3 --verdict dropped --type drop --last 3
say "tendril bpf policy get (db's entries in the policy map) and the datapath's counters"
DB_EP=$("$TENDRIL" endpoint list -o json | jq -r '.[] | select(.podName == "tdldemo3") | .id')
check_output "db's policy map lets web's identity in on 5432/TCP, by NetworkPolicy/demo/db-from-web" \
  '5432/TCP +ALLOW +NetworkPolicy/demo/db-from-web' "$TENDRIL" bpf policy get "$DB_EP"
check_output "the datapath counted the policy drop" '^POLICY +ingress +[1-9]' "$TENDRIL" bpf metrics
say "tendril status: the datapath as the kernel has it, the last minute's drops, the policy in force"
"$TENDRIL" status >"$WORK/status.txt"
cat "$WORK/status.txt"
check "status: the BPF filesystem is the node's (programs and maps outlive the agent)" grep -qE "^BPF filesystem +.*\(the node's\)" "$WORK/status.txt"
check "status: programs on every pod's device, checked in the kernel" grep -qE '^Programs +.*; 3/3 endpoints$' "$WORK/status.txt"
check "status: the policy's drop among the last minute's drops" grep -qE '^Drops \(last [0-9]+s\) +[1-9][0-9]* \(.*POLICY' "$WORK/status.txt"
check "status: 1 policy in force" grep -qE '^Policies +1 in force, ' "$WORK/status.txt"

say "agent restart: policies come back from the kvstore and pods stay enforced while it is down"
demo_kill agent
check_not "the agent is down" quietly "$TENDRIL" status
show_enforcement
check "tdldemo1 -> tdldemo2 ping still allowed" pings tdldemo1 "${IPS[tdldemo2]}"
start_agent
echo "endpoints restored from its state dir, policies from the kvstore:"
"$TENDRIL" endpoint list
check "3 endpoints restored, all ready" test "$("$TENDRIL" endpoint list -o json | jq '[.[] | select(.state == "ready")] | length')" = 3
check_output "NetworkPolicy/demo/db-from-web restored" '^restored: NetworkPolicy/demo/db-from-web$' \
  jq -r '.policies[] | "restored: \(.name)"' <(TENDRIL_SOCK=$SOCK "$TENDRIL" policy get -o json)
show_enforcement

say "policy deleted: traffic restored"
"$TENDRIL" policy delete --all
check "tdldemo1 (web) -> db ping: allowed" pings tdldemo1 "$DB"
check "tdldemo1 (web) -> db over IPv6 ping: allowed" pings tdldemo1 "$DB6"

say "services: a ClusterIP load-balanced in eBPF over two backend pods (tdldemo2, tdldemo3 answer on TCP 8080)"
hello tdldemo2 tdldemo2 8080
hello tdldemo3 tdldemo3 8080
hello "$OUTSIDE" outside 9000
for a in "tdldemo2 ${IPS[tdldemo2]}" "tdldemo3 ${IPS[tdldemo3]}" "$OUTSIDE 10.199.9.2"; do
  read -r ns addr <<<"$a"
  port=8080; [ "$ns" = "$OUTSIDE" ] && port=9000
  check_within 5 "$ns's server listens on $addr:$port" quietly tcp "$ns" "$addr" "$port"
done
"$TENDRIL" service upsert --id 1 --frontend 10.96.0.10:80 --backends "${IPS[tdldemo2]}:8080,${IPS[tdldemo3]}:8080"
echo "tdldemo1 -> 10.96.0.10:80, 16 new connections (each one pinned to its backend by conntrack):"
for _ in $(seq 16); do tcp tdldemo1 10.96.0.10 80 || echo "no answer"; done | sort | uniq -c >"$WORK/lb.txt"
cat "$WORK/lb.txt"
check "all 16 answered, by both backends" test "$(grep -c 'hello from tdldemo[23], you are ' "$WORK/lb.txt")" = 2 -a \
  "$(awk '/hello from/ { n += $1 } END { print n }' "$WORK/lb.txt")" = 16
check_output "the node itself -> 10.96.0.10:80: answered by a backend" '^hello from tdldemo[23], you are 10\.250\.0\.1$' \
  tcp "$NODE" 10.96.0.10 80
say "an IPv6 ClusterIP: [fd00:96::10]:80 over the same two pods' IPv6 addresses"
"$TENDRIL" service upsert --id 4 --frontend "[fd00:96::10]:80" --backends "[${IPS6[tdldemo2]}]:8080,[${IPS6[tdldemo3]}]:8080"
for _ in $(seq 16); do tcp tdldemo1 fd00:96::10 80 || echo "no answer"; done | sort | uniq -c >"$WORK/lb6.txt"
cat "$WORK/lb6.txt"
check "all 16 answered over IPv6, by both backends, each seeing tdldemo1's IPv6 address" test "$(grep -c "hello from tdldemo[23], you are ${IPS6[tdldemo1]}$" "$WORK/lb6.txt")" = 2 -a \
  "$(awk '/hello from/ { n += $1 } END { print n }' "$WORK/lb6.txt")" = 16
"$TENDRIL" service upsert --id 3 --frontend 10.96.0.11:80 --backends "${IPS[tdldemo2]}:8080" >/dev/null
check_output "a pod -> its own service (hairpin): tdldemo2 -> 10.96.0.11:80, backed only by itself, answers" \
  '^hello from tdldemo2, you are ' tcp tdldemo2 10.96.0.11 80

say "NodePort 30080 with externalTrafficPolicy Local, from the outside host: the backend sees the client's own address"
"$TENDRIL" service upsert --id 2 --type NodePort --traffic-policy Local --frontend 0.0.0.0:30080 --backends "${IPS[tdldemo3]}:8080"
check_output "outside -> 10.199.9.1:30080: tdldemo3 answers and sees 10.199.9.2" '^hello from tdldemo3, you are 10\.199\.9\.2$' \
  tcp "$OUTSIDE" 10.199.9.1 30080

say "a ClusterIP answers no one outside the cluster: the outside host routes 10.96.0.0/12 via the node, is refused (CLUSTERIP_FROM_OUTSIDE); the NodePort still answers it"
ip -n "$OUTSIDE" route add 10.96.0.0/12 via 10.199.9.1
monitor monitor-clusterip "$WORK/monitor-clusterip.txt" --type drop
check_not "outside -> 10.96.0.10:80: no answer" tcp "$OUTSIDE" 10.96.0.10 80
check_output "outside -> NodePort 10.199.9.1:30080: answered" '^hello from tdldemo3' tcp "$OUTSIDE" 10.199.9.1 30080
check "tendril monitor: the SYN to the ClusterIP dropped as CLUSTERIP_FROM_OUTSIDE" \
  wait_line "$WORK/monitor-clusterip.txt" 'DROP \(CLUSTERIP_FROM_OUTSIDE.* -> 10\.96\.0\.10:80 '
demo_kill monitor-clusterip
grep -m1 CLUSTERIP_FROM_OUTSIDE "$WORK/monitor-clusterip.txt"

say "tendril bpf lb list: the frontends' slots, backends and reverse NAT as the datapath holds them"
lb_frontends() {
  local lb f
  lb=$("$TENDRIL" bpf lb list) || return 1
  printf '%s\n' "$lb"
  for f in 10.96.0.10:80/TCP 0.0.0.0:30080/TCP 10.96.0.11:80/TCP '[fd00:96::10]:80/TCP'; do grep -qF -- "$f" <<<"$lb" || return 1; done
}
check "the datapath holds the four services' frontends" lb_frontends

say "pods leaving the cluster are masqueraded in eBPF (no nftables table): the outside server sees the node's address"
check_output "tdldemo1 -> outside 10.199.9.2:9000: the server sees the node's 10.199.9.1" '^hello from outside, you are 10\.199\.9\.1$' \
  tcp tdldemo1 10.199.9.2 9000
# no_nft_table: nft answers in the node, and lists no table tendril.
no_nft_table() { local t; t=$(in_node nft list tables) || return 1; ! grep -q tendril <<<"$t"; }
check "the node has no nft table tendril" no_nft_table
check_output "tendril bpf nat list: the connection's masquerade entries" '10\.250\.0\.2:[0-9]+ -> 10\.199\.9\.2:9000 +source 10\.199\.9\.1:[0-9]+ +masquerade' \
  "$TENDRIL" bpf nat list

say "many short connections from a pod to one outside address:port for 3 s (a native client, 2 threads): each port is taken again as soon as its connection is reset, so none is refused"
demo_bg crr-server nsenter --net=/var/run/netns/$OUTSIDE -- "$REPO/build/bench/crr" server -t 1 -l 10.199.9.2:7000 >/dev/null
check_within 5 "the outside host's server listens on 10.199.9.2:7000" \
  quietly nsenter --net=/var/run/netns/$OUTSIDE -- bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ 10.199.9.2 7000
nsenter --net=/var/run/netns/tdldemo1 -- "$REPO/build/bench/crr" client -t 2 -d 3 -a 10.199.9.2:7000 >"$WORK/crr.json"
node -e 'const r = JSON.parse(require("fs").readFileSync(0, "utf8")); console.log(`${r.connections} connections, ${Math.round(r.connPerS)} per second, ${r.errorCount} errors, p99 ${r.latencyUs.p99} µs`)' <"$WORK/crr.json"
check "every connection succeeded (0 errors)" test "$(jq '.errorCount' "$WORK/crr.json")" = 0 -a "$(jq '.connections' "$WORK/crr.json")" -gt 0
# no_nat_drops: the datapath's counters (which must answer) have no NAT_ reason.
no_nat_drops() { local m; m=$("$TENDRIL" bpf metrics) || return 1; ! grep -q 'NAT_' <<<"$m"; }
check "tendril bpf metrics: no NAT drop (NAT_PORT_EXHAUSTED, NAT_FULL) counted" no_nat_drops

say "a backend removed from the service: the datapath sees it is no longer a member and chooses again; new connections go to the one left"
"$TENDRIL" service upsert --id 1 --frontend 10.96.0.10:80 --backends "${IPS[tdldemo3]}:8080" >/dev/null
for _ in $(seq 3); do tcp tdldemo1 10.96.0.10 80 || echo "no answer"; done | sort | uniq -c >"$WORK/lb.txt"
cat "$WORK/lb.txt"
check "3 of 3 answered by tdldemo3" grep -qE '^ +3 hello from tdldemo3, you are ' "$WORK/lb.txt"
for id in 1 2 3 4; do "$TENDRIL" service delete "$id" >/dev/null; done
check "services 1, 2, 3 deleted: tendril service list is empty" test "$(count_of "$SOCK" service list)" = 0

say "CHECK, then DEL every pod"
for p in "${PODS[@]}"; do
  check "$p: CNI CHECK ok" in_node "$TENDRIL" cni check tendril "/var/run/netns/$p" --cache-dir "$WORK/cache"
done
for p in "${PODS[@]}"; do
  check "$p: CNI DEL ok" env CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=$p" \
    nsenter --net=/var/run/netns/$NODE -- "$TENDRIL" cni del tendril "/var/run/netns/$p" --cache-dir "$WORK/cache"
done
check "tendril endpoint list is empty" test "$(count_of "$SOCK" endpoint list)" = 0
check_output "tendril status: 0 endpoints" '^Endpoints +0$' "$TENDRIL" status
say "the metrics again: the DELs counted, no endpoint ready"
check "3 CHECKs and 3 DELs counted as successes, 0 endpoints ready" metrics_have \
  'tendril_cni_operations_total{verb="CHECK",result="success"} 3' 'tendril_cni_operations_total{verb="DEL",result="success"} 3' \
  'tendril_endpoint_state{state="ready"} 0'

# cni_refused CODE CMD...: CMD fails with the CNI error CODE on stderr (printed).
cni_refused() {
  local code=$1 err rc=0
  shift
  err=$("$@" 2>&1 >/dev/null) || rc=$?
  printf '%s\n' "$err"
  echo "exit code $rc"
  [ "$rc" != 0 ] && [ "$(jq -r .code <<<"$err" 2>/dev/null)" = "$code" ]
}
say "bad input: an interface name that is too long gives CNI error 4 and changes nothing"
check "refused with CNI error 4" cni_refused 4 env CNI_IFNAME=this-is-too-long \
  nsenter --net=/var/run/netns/$NODE -- "$TENDRIL" cni add tendril /var/run/netns/tdldemo1 --cache-dir "$WORK/cache"
check "tendril endpoint list is still empty" test "$(count_of "$SOCK" endpoint list)" = 0
say "the node's own namespace as a pod's netns is refused with CNI error 4; the node's links are untouched"
check "refused with CNI error 4" cni_refused 4 in_node "$TENDRIL" cni add tendril /var/run/netns/$NODE --cache-dir "$WORK/cache"
check_output "the node's lo is still up" '^lo +UNKNOWN .*<LOOPBACK,UP,LOWER_UP>' ip -n "$NODE" -br link show lo
say "a pod may not claim a reserved identity: TENDRIL_LABELS=reserved:host is refused with CNI error 7"
check "refused with CNI error 7" cni_refused 7 env "CNI_ARGS=IgnoreUnknown=1;TENDRIL_LABELS=reserved:host" \
  nsenter --net=/var/run/netns/$NODE -- "$TENDRIL" cni add tendril /var/run/netns/tdldemo1 --cache-dir "$WORK/cache"
say "a second agent on this node stops before touching anything"
check_output "the second agent exits: another agent owns this node" 'another agent owns this node' \
  bash -c '! "$@"' _ nsenter --net=/var/run/netns/$NODE -- "$REPO/bin/tendril-agent" --state-dir "$WORK/second" \
  --lib-dir "$WORK/second/lib" --node-name demo-node-2 --pod-cidr 10.251.0.0/24
say "tendril-agent cleanup --force, from the host's namespace, with the agent's socket and pins: it finds the running agent and refuses"
check_output "cleanup refuses, naming the live agent, and changes nothing" 'refusing: an agent uses this state' \
  bash -c '! "$@"' _ "$REPO/bin/tendril-agent" cleanup --force --state-dir "$STATE" --lib-dir "$STATE/lib" --bpffs-root "$BPFFS" --socket "$SOCK"
check_output "the first agent still answers" '^Agent +ok' "$TENDRIL" status
check "its pinned maps and its state dir are still there" test -d "$BPFFS/tendril" -a -e "$STATE/agent.json"

say "Kubernetes: an agent following an API server (a fake one on loopback: no API server runs on this machine) that kubectl writes to"
ip netns add "$K8S_NODE"
ip -n "$K8S_NODE" link set lo up
for p in "${K8S_PODS[@]}"; do ip netns add "$p"; done
in_k8s() { nsenter --net=/var/run/netns/$K8S_NODE -- "$@"; }
# The fake stops (removing its kubeconfig's temp dir) on SIGTERM or when its stdin closes.
coproc FAKE { export TDL_DEMO_JOB=fake-api; exec nsenter --net=/var/run/netns/$K8S_NODE -- node "$REPO/dist/bench/k8sFakeApiWorker.js" '{"crds":"tendril"}'; }
DEMO_JOBS+=(fake-api)
read -r _ <&"${FAKE[0]}"
echo '{"id":1,"op":"kubeconfig"}' >&"${FAKE[1]}"
read -r reply <&"${FAKE[0]}"
export KUBECONFIG
KUBECONFIG=$(jq -r .path <<<"$reply")
kube() { in_k8s kubectl "$@"; }
kube apply --validate=false -f - <<'YAML'
apiVersion: v1
kind: Namespace
metadata: { name: kube-system }
---
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
k8s() { TENDRIL_SOCK=$K8S_SOCK "$TENDRIL" "$@"; }
echo "tendril-agent --k8s-kubeconfig \$KUBECONFIG --ipam kubernetes (the pod CIDR comes from the Node object; no kvstore named: the cluster's state lives in the API server)"
demo_bg k8s-agent nsenter --net=/var/run/netns/$K8S_NODE -- "$REPO/bin/tendril-agent" --state-dir "$K8S_STATE" --lib-dir "$K8S_STATE/lib" \
  --node-name demo-k8s --k8s-kubeconfig "$KUBECONFIG" --ipam kubernetes --bpffs-root "$BPFFS-k8s" --log-file "$WORK/k8s-agent.log"
for _ in $(seq 150); do k8s status >/dev/null 2>&1 && break; sleep 0.1; done
check_output "the agent answers, synced with the API server" '^Kubernetes +connected to .*, synced ' k8s status
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
k8s endpoint list
# k8s_labelled POD LABEL: the endpoint of shop/POD carries LABEL.
k8s_labelled() { k8s endpoint list -o json | jq -e --arg pod "shop/$1" --arg l "$2" \
  '[.[] | select("\(.podNamespace)/\(.podName)" == $pod) | .labels[] | select(. == $l)] | length == 1' >/dev/null; }
k8s_pods_labelled() { k8s_labelled web k8s:app=web && k8s_labelled db k8s:app=db; }
check "web (${K8S_IPS[web]}) and db (${K8S_IPS[db]}) carry the labels the API server gives them" k8s_pods_labelled
say "No etcd: the node, each pod's endpoint and its identity are objects in the API server (identity allocation mode crd)"
k8s_mode() { k8s config -o json | jq -r .identityAllocationMode; }
check_output "the agent runs in crd mode (its default when it follows an API server and no etcd is named)" '^crd$' k8s_mode
kube get tendrilnodes -o custom-columns=NODE:.metadata.name,POD-CIDRS:.spec.podCIDRs,ROUTING:.spec.routingMode
kube -n kube-system get lease tendril-node-demo-k8s -o custom-columns=LEASE:.metadata.name,HOLDER:.spec.holderIdentity,TTL:.spec.leaseDurationSeconds
kube get tendrilendpoints -n shop -o custom-columns=POD:.metadata.name,NODE:.spec.node,IDENTITY:.spec.identity,ADDRESSES:.spec.addresses
# tep_identity POD: the identity in shop/POD's TendrilEndpoint is its endpoint's, and a TendrilIdentity of that number holds k8s:app=POD.
tep_identity() {
  local id
  id=$(kube -n shop get tendrilendpoint "$1" -o jsonpath='{.spec.identity}') || return 1
  k8s endpoint list -o json | jq -e --arg pod "shop/$1" --argjson id "$id" '[.[] | select("\(.podNamespace)/\(.podName)" == $pod and .identity == $id)] | length == 1' >/dev/null &&
    [ "$(kube get tendrilidentities -l "app=$1" -o jsonpath='{.items[*].metadata.name}')" = "$id" ]
}
tep_identities() { tep_identity web && tep_identity db; }
check_within 5 "web's and db's TendrilEndpoints name their identities, each a TendrilIdentity with the pod's labels" tep_identities
hello tdldemok2 db 5432
check_within 5 "web -> db TCP 5432: answered" quietly tcp tdldemok1 "${K8S_IPS[db]}" 5432
say "kubectl apply: a NetworkPolicy letting only app=api into app=db"
TENDRIL_SOCK=$K8S_SOCK monitor k8s-monitor "$WORK/k8s-monitor.txt" --type drop
kube apply --validate=false -f - <<'YAML'
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: { name: db-from-api, namespace: shop }
spec:
  podSelector: { matchLabels: { app: db } }
  policyTypes: [Ingress]
  ingress: [ { from: [ { podSelector: { matchLabels: { app: api } } } ], ports: [ { protocol: TCP, port: 5432 } ] } ]
YAML
check_within 5 "web -> db TCP 5432: no answer (web is not app=api)" no_tcp tdldemok1 "${K8S_IPS[db]}" 5432
check "tendril monitor: dropped by the default deny of NetworkPolicy/shop/db-from-api" \
  wait_line "$WORK/k8s-monitor.txt" 'DROP \(POLICY.*:5432 .*default deny set by NetworkPolicy/shop/db-from-api'
demo_kill k8s-monitor
grep -m1 'NetworkPolicy/shop/db-from-api' "$WORK/k8s-monitor.txt"
say "kubectl label pod web app=api: the pod's identity changes, and the policy lets it in"
kube -n shop label pod web app=api --overwrite
check_within 5 "web's endpoint now carries k8s:app=api" k8s_labelled web k8s:app=api
k8s endpoint list
check_within 5 "web -> db TCP 5432: answered" quietly tcp tdldemok1 "${K8S_IPS[db]}" 5432
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
k8s_db_service() { k8s service list | grep -F '10.96.50.5:5432/TCP' | grep -qF "${K8S_IPS[db]}:5432/TCP (active)"; }
check_within 5 "the agent has the service 10.96.50.5:5432 -> ${K8S_IPS[db]}:5432" k8s_db_service
k8s service list
check_output "web -> 10.96.50.5:5432: db answers" '^hello from db, you are ' tcp tdldemok1 10.96.50.5 5432
k8s status
demo_kill k8s-agent

say "two nodes on one etcd: a hub namespace with a bridge and etcd, nodes $CL_A and $CL_B on it (10.198.0.11, .12)"
ip netns add "$CL_HUB"
ip -n "$CL_HUB" link set lo up
# A fixed MAC: a bridge without one takes its lowest port MAC, which changes as ports join.
ip -n "$CL_HUB" link add tdlhub0 address 02:74:64:6c:00:01 type bridge
ip -n "$CL_HUB" addr add 10.198.0.1/24 dev tdlhub0
ip -n "$CL_HUB" link set tdlhub0 up
demo_bg etcd nsenter --net=/var/run/netns/$CL_HUB -- etcd --name tdl-demo --data-dir "$WORK/etcd" \
  --listen-client-urls http://10.198.0.1:2379 --advertise-client-urls http://10.198.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster tdl-demo=http://127.0.0.1:2380 >"$WORK/etcd.log" 2>&1
declare -A CL_SOCK CL_POD_IP CL_ID CL_APP=([$CL_A]=client [$CL_B]=server)
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
check "etcd serves on 10.198.0.1:2379" wait_line "$WORK/etcd.log" 'ready to serve client requests' 30
# Each node serves its flows on its node IP, to whoever has this token (a relay, tendril observe --server).
(umask 077 && head -c 24 /dev/urandom | base64 >"$WORK/node.token" && head -c 24 /dev/urandom | base64 >"$WORK/relay.token")
i=0
for n in "$CL_A" "$CL_B"; do
  i=$((i + 1))
  CL_SOCK[$n]="$WORK/$n/tendril.sock"
  demo_bg "agent-$n" nsenter --net=/var/run/netns/$n -- "$REPO/bin/tendril-agent" --state-dir "$WORK/$n" --lib-dir "$WORK/$n/lib" --node-name "$n" \
    --kvstore etcd --kvstore-opt etcd.endpoints=http://10.198.0.1:2379 --ipam block --pool-cidr 10.197.0.0/16 \
    --routing-mode tunnel --node-ip "10.198.0.1$i" --bpffs-root "$BPFFS-$n" --log-file "$WORK/$n.log" \
    --flows-listen-addr "10.198.0.1$i:4244" --flows-token-file "$WORK/node.token"
done
for n in "$CL_A" "$CL_B"; do
  for _ in $(seq 100); do TENDRIL_SOCK=${CL_SOCK[$n]} "$TENDRIL" status >/dev/null 2>&1 && break; sleep 0.1; done
  check "the agent of $n answers" quietly env TENDRIL_SOCK="${CL_SOCK[$n]}" "$TENDRIL" status
  mkdir -p "$WORK/$n/net.d"
  printf '{"cniVersion":"1.0.0","name":"tendril","plugins":[{"type":"tendril-cni","socket":"%s"}]}\n' "${CL_SOCK[$n]}" >"$WORK/$n/net.d/10-tendril.conflist"
  out=$(NETCONFPATH="$WORK/$n/net.d" CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=demo;K8S_POD_NAME=${n}p;TENDRIL_LABELS=app%3D${CL_APP[$n]}" \
    nsenter --net=/var/run/netns/$n -- "$TENDRIL" cni add tendril "/var/run/netns/${n}p" --cache-dir "$WORK/$n/cache")
  CL_POD_IP[$n]=$(jq -r '.ips[0].address | split("/")[0]' <<<"$out")
  CL_ID[$n]=$(TENDRIL_SOCK=${CL_SOCK[$n]} "$TENDRIL" endpoint list -o json | jq -r '.[0].identity')
  echo "pod ${n}p (app=${CL_APP[$n]}) on $n: ${CL_POD_IP[$n]}, identity ${CL_ID[$n]}"
done
say "tendril node list (on $CL_A): each node's addresses and pod CIDRs, from the registry in etcd"
routed_nodes() { TENDRIL_SOCK=${CL_SOCK[$CL_A]} "$TENDRIL" node list -o json | jq -e '[.[] | select(.local or .routesInstalled)] | length == 2' >/dev/null; }
check_within 10 "$CL_A knows both nodes and routes to $CL_B's pod CIDR" routed_nodes
TENDRIL_SOCK=${CL_SOCK[$CL_A]} "$TENDRIL" node list
say "pod on $CL_A -> pod on $CL_B through the VXLAN overlay (tendril_vxlan, UDP 8472); a capture on the underlay"
demo_bg capture nsenter --net=/var/run/netns/$CL_B -- timeout 5 tcpdump -n -l -T vxlan -i eth0 -c 2 udp port 8472 >"$WORK/capture.txt" 2>"$WORK/capture.err"
check "tcpdump listens on $CL_B's eth0" wait_line "$WORK/capture.err" 'listening on eth0'
overlay_ping() { nsenter --net="/var/run/netns/${CL_A}p" -- ping -c3 -W2 "${CL_POD_IP[$CL_B]}" | tail -2; }
check_output "${CL_A}p -> ${CL_B}p (${CL_POD_IP[$CL_B]}): 3 of 3 pings answered" ' 0% packet loss' overlay_ping
wait "$DEMO_BG_PID" || true
cat "$WORK/capture.txt"
vnis_are_identities() { grep -q " vni ${CL_ID[$CL_A]}\$" "$WORK/capture.txt" && grep -q " vni ${CL_ID[$CL_B]}\$" "$WORK/capture.txt"; }
check "each packet's VNI is its source pod's security identity (${CL_ID[$CL_A]} out, ${CL_ID[$CL_B]} back): the receiving node enforces policy on it, not on the inner source address" \
  vnis_are_identities
say "$CL_B's ipcache in eBPF: the remote pod and node with their tunnel endpoint"
ipcache_of_b() { TENDRIL_SOCK=${CL_SOCK[$CL_B]} "$TENDRIL" bpf ipcache list | grep -E "PREFIX|${CL_POD_IP[$CL_A]//./\\.}/|10\.198\.0\.11/"; }
check_output "the remote pod ${CL_POD_IP[$CL_A]} with identity ${CL_ID[$CL_A]} behind tunnel 10.198.0.11" \
  "^${CL_POD_IP[$CL_A]//./\\.}/32 +${CL_ID[$CL_A]} +10\\.198\\.0\\.11 " ipcache_of_b

say "tendril relay: every node's flows in one place (found in the node registry), and the web UI"
demo_bg relay nsenter --net=/var/run/netns/$CL_HUB -- "$TENDRIL" relay --listen-addr 10.198.0.1:4245 --token-file "$WORK/relay.token" \
  --kvstore etcd --kvstore-opt etcd.endpoints=http://10.198.0.1:2379 --peer-token-file "$WORK/node.token" 2>"$WORK/relay.log"
check "the relay serves on 10.198.0.1:4245" wait_line "$WORK/relay.log" 'serving on' 20
relay_observe() { nsenter --net=/var/run/netns/$CL_HUB -- "$TENDRIL" observe --server http://10.198.0.1:4245 --token-file "$WORK/relay.token" "$@"; }
both_nodes() { relay_observe --from-ip "${CL_POD_IP[$CL_A]}" --to-ip "${CL_POD_IP[$CL_B]}" --protocol icmp --last 20 -o json | jq -s -e '[.[].node] | unique | length == 2' >/dev/null; }
check_within 10 "the relay merges both nodes' flows of the cross-node ping (each node saw its side)" both_nodes
ui_page() { nsenter --net=/var/run/netns/$CL_HUB -- curl -fsS http://10.198.0.1:4245/ | grep -q '<title>tendril flows</title>'; }
check "the relay serves the flow UI" ui_page
echo "The flow UI (live map, flows, what decided each drop, suggest a policy): http://10.198.0.1:4245/#token=$(cat "$WORK/relay.token")"
echo "  (in namespace $CL_HUB; on a real cluster: tendril relay --listen-addr <addr> … and open its address)"
echo "What the demo did across the nodes, in one line per flow:"
relay_observe --from-ip "${CL_POD_IP[$CL_A]}" --protocol icmp --last 2

say "done; cleaning up"
