#!/bin/bash
# make demo: networks pods through tendril and shows what works, then cleans up.
# Everything happens inside a "node" network namespace so the host's root
# namespace is untouched; names carry the tdl prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
TENDRIL="$PWD/bin/tendril"
NODE=tdldemonode
WORK=$(mktemp -d /tmp/tdl-demo.XXXXXX)
PODS=(tdldemoa tdldemob)

cleanup() {
  for p in "${PODS[@]}"; do ip netns del "$p" 2>/dev/null || true; done
  ip netns del "$NODE" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
cleanup_leftovers() { for p in "${PODS[@]}" "$NODE"; do ip netns del "$p" 2>/dev/null || true; done; }
cleanup_leftovers

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
in_node() { nsenter --net=/var/run/netns/$NODE -- "$@"; }

say "a node namespace ($NODE) and two pod namespaces"
ip netns add "$NODE"
ip -n "$NODE" link set lo up
for p in "${PODS[@]}"; do ip netns add "$p"; done

mkdir -p "$WORK/net.d"
cat > "$WORK/net.d/10-tdldemo.conflist" <<CONF
{
  "cniVersion": "1.0.0",
  "name": "tdldemo",
  "plugins": [
    { "type": "bridge", "bridge": "tdlbr0", "isGateway": true, "ipMasq": false,
      "ipam": { "type": "host-local", "subnet": "10.220.0.0/24", "dataDir": "$WORK/ipam" } },
    { "type": "portmap", "capabilities": { "portMappings": true }, "snat": false },
    { "type": "tuning", "sysctl": { "net.ipv4.conf.eth0.arp_notify": "1" } }
  ]
}
CONF
export NETCONFPATH="$WORK/net.d" CNI_PATH=/usr/lib/cni
cat "$WORK/net.d/10-tdldemo.conflist"

say "tendril cni list"
in_node "$TENDRIL" cni list

declare -A IPS
for p in "${PODS[@]}"; do
  say "tendril cni add tdldemo /var/run/netns/$p"
  out=$(in_node "$TENDRIL" cni add tdldemo "/var/run/netns/$p" --cache-dir "$WORK/cache")
  echo "$out"
  IPS[$p]=$(jq -r '.ips[0].address | split("/")[0]' <<<"$out")
done

say "pod a -> pod b (${IPS[tdldemob]})"
nsenter --net=/var/run/netns/tdldemoa -- ping -c 2 -W 2 "${IPS[tdldemob]}"

say "tendril cni check (both pods)"
for p in "${PODS[@]}"; do in_node "$TENDRIL" cni check tdldemo "/var/run/netns/$p" --cache-dir "$WORK/cache" && echo "$p: ok"; done

say "result cache"
ls -l "$WORK/cache/results"

say "tendril cni del (both pods)"
for p in "${PODS[@]}"; do in_node "$TENDRIL" cni del tdldemo "/var/run/netns/$p" --cache-dir "$WORK/cache"; done
echo "links left in pod a: $(nsenter --net=/var/run/netns/tdldemoa -- ip -o link | wc -l) (just lo)"
echo "addresses still allocated: $(find "$WORK/ipam" -name '10.*' | wc -l)"

say "bad input: an unknown network gives a CNI error and exit code 1"
in_node "$TENDRIL" cni add tdl-nope /var/run/netns/tdldemoa --cache-dir "$WORK/cache" || echo "exit code: $?"

say "done; everything is cleaned up"
