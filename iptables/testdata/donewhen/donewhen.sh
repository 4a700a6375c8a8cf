#!/bin/bash
# Done-when run of issue #14 for the iptables engine (iptables-nft), see BENCHMARKS.md.
# usage: donewhen.sh /path/to/minimal-proxy [services] [endpoints] [mode: iptables (default) or userspace]
set -u
BIN=$1; N=${2:-2000}; E=${3:-5}; MODE=${4:-iptables}; NS=hscale-$$; DIR=$(mktemp -d)
GEN=$(dirname "$0")/genobjs.py
python3 $GEN $N $E 0 > $DIR/objs.yaml
ip netns add $NS; ip -n $NS link set lo up
PID=
# KEEPLOG=file keeps the proxy's log there.
cleanup() { [ -n "$PID" ] && kill $PID 2>/dev/null && wait $PID 2>/dev/null; [ -n "${KEEPLOG:-}" ] && cp $DIR/log "$KEEPLOG"; ip netns del $NS; rm -rf $DIR; }
trap cleanup EXIT
trap 'exit 1' INT TERM
IPT="ip netns exec $NS iptables-nft -w"
now() { date +%s.%N; }
metrics() { ip netns exec $NS curl -s http://127.0.0.1:10249/metrics; }
m() { metrics | awk -v k="$1" 'index($1, k) == 1 && (length($1) == length(k) || substr($1, length(k)+1, 1) == "{") {print $2}'; }
T0=$(now)
ip netns exec $NS $BIN --proxy-mode $MODE --objects-file $DIR/objs.yaml --hostname-override node-a \
  --iptables-sync-period 10s --iptables-min-sync-period 1s --metrics-bind-address 127.0.0.1:10249 \
  --healthz-bind-address "" --v 4 > $DIR/log 2>&1 &
PID=$!
until [ "$(m kubeproxy_sync_proxy_rules_duration_seconds_count)" != "" ] && [ "$(m kubeproxy_sync_proxy_rules_duration_seconds_count)" != "0" ]; do sleep 0.2; kill -0 $PID || { cat $DIR/log; exit 1; }; done
echo "first sync done after $(echo "$(now) - $T0" | bc) s (process start to metric)"
SVC=
if [ $MODE = iptables ]; then
  SVC=$($IPT -t nat -S KUBE-SERVICES | grep '"ns/svc-0:http cluster IP"' | sed 's/.*-j //')
  echo "service ns/svc-0 chain: $SVC"
fi
# handoff: seconds from the change tracker recording the EndpointSlice change of ns/svc-0 (the
# handler was called: the proxy has the change; logged at --v 4) to the first "Synced" line after it
# that changed a service (the sync returned: the kernel has it, or for userspace the proxy's
# balancers do), from the log's own microsecond timestamps. The file source's poll (up to 2 s) and
# its parse of the file come before the first timestamp and are not counted.
tsec() { sed 's/^"ts"="[0-9-]* \([0-9:.]*\)".*/\1/' | awk -F: '{printf "%.6f\n", $1*3600+$2*60+$3}'; }
handoff() {
  local n got synced
  n=$(grep -n '"msg"="Recorded an EndpointSlice change".*"endpointSlice"={"name"="svc-0-x"' $DIR/log | tail -1 | cut -d: -f1)
  [ -n "$n" ] || return
  got=$(sed -n "${n}p" $DIR/log | tsec)
  synced=$(tail -n +$n $DIR/log | grep '"msg"="Synced"' | grep -v '"changed"=0' | head -1 | tsec)
  [ -n "$synced" ] && echo "$synced - $got" | bc | sed 's/^\./0./'
}
sample() { # seconds: per-sync durations from the histogram deltas
  local c0 s0 f0 fs0 c1 s1 f1 fs1 i
  c0=$(m kubeproxy_sync_proxy_rules_duration_seconds_count); s0=$(m kubeproxy_sync_proxy_rules_duration_seconds_sum)
  for i in $(seq 1 $1); do
    sleep 1
    c1=$(m kubeproxy_sync_proxy_rules_duration_seconds_count); s1=$(m kubeproxy_sync_proxy_rules_duration_seconds_sum)
    if [ "$c1" != "$c0" ]; then echo "  t+${i}s: $((c1-c0)) sync(s), $(echo "($s1 - $s0)/($c1 - $c0)" | bc -l | cut -c1-6) s each"; fi
    c0=$c1; s0=$s1
  done
  echo "  totals: syncs $(m kubeproxy_sync_proxy_rules_duration_seconds_count), full $(m kubeproxy_sync_full_proxy_rules_duration_seconds_count) (sum $(m kubeproxy_sync_full_proxy_rules_duration_seconds_sum) s), partial $(m kubeproxy_sync_partial_proxy_rules_duration_seconds_count) (sum $(m kubeproxy_sync_partial_proxy_rules_duration_seconds_sum) s)"
}
echo "idle, 30 s:"; sample 30
for g in 1 2 3 4 5 6; do
  if [ $MODE = iptables ]; then
    before=$($IPT -t nat -S $SVC | md5sum)
    python3 $GEN $N $E $g > $DIR/objs.new; mv $DIR/objs.new $DIR/objs.yaml; t=$(now)
    while [ "$($IPT -t nat -S $SVC | md5sum)" == "$before" ]; do sleep 0.05; done
    echo "endpoint change $g: in the kernel after $(echo "$(now) - $t" | bc | cut -c1-5) s from the file write (file re-read every 2 s, min-sync 1 s)"
  else
    seen=$(grep -c '"endpointSlice"={"name"="svc-0-x"' $DIR/log)
    python3 $GEN $N $E $g > $DIR/objs.new; mv $DIR/objs.new $DIR/objs.yaml
    for i in $(seq 1 200); do [ "$(grep -c '"endpointSlice"={"name"="svc-0-x"' $DIR/log)" != "$seen" ] && break; sleep 0.1; done
  fi
  sleep 4
  echo "endpoint change $g: proxy had it (handler called) -> the sync that applied it returned: $(handoff) s"
done
if [ $MODE != iptables ]; then
  echo "after the changes, 20 s:"; sample 20
  echo "process CPU: $(ps -o times= -p $PID) s over $(echo "$(now) - $T0" | bc | cut -d. -f1) s"
  exit 0
fi
echo "hand flush: iptables-nft -t nat -F; -X"
$IPT -t nat -F; $IPT -t nat -X; t=$(now)
first=""
while true; do
  if [ -z "$first" ] && $IPT -t nat -S KUBE-SERVICES 2>/dev/null | grep -q -- "-j $SVC"; then first=$(echo "$(now) - $t" | bc | cut -c1-5); fi
  if $IPT -t nat -S KUBE-SERVICES 2>/dev/null | tail -1 | grep -q KUBE-NODEPORTS; then break; fi
  sleep 0.1
done
echo "hand flush repaired: first service back after $first s, whole nat table (node-port tail rule, last chunk) after $(echo "$(now) - $t" | bc | cut -c1-5) s"
echo "after the repair, 20 s:"; sample 20
echo "process CPU: $(ps -o times= -p $PID) s over $(echo "$(now) - $T0" | bc | cut -d. -f1) s"
