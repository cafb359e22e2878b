#!/usr/bin/env bash
# A three-node RabbitMQ cluster on loopback for the tests: run as root, without systemd.
#
#   scripts/rabbitmq-cluster.sh install       install RabbitMQ (apt-get) if missing
#   scripts/rabbitmq-cluster.sh start         install (apt-get) if missing, start the three
#                                             nodes, join them into one cluster, print the
#                                             URLs (comma-separated, as --backend takes them)
#   scripts/rabbitmq-cluster.sh stop          stop every node (state stays)
#   scripts/rabbitmq-cluster.sh url           print the URLs
#   scripts/rabbitmq-cluster.sh stop-node N   stop node N (1-3); the others go on
#   scripts/rabbitmq-cluster.sh start-node N  start node N again; it rejoins by itself
#   scripts/rabbitmq-cluster.sh leader QUEUE  print the number of the node that leads the
#                                             quorum queue QUEUE (of vhost /)
#   scripts/rabbitmq-cluster.sh queues QUEUE  print QUEUE, its dead letters and every
#                                             delay queue that holds messages, as their
#                                             leaders count them: messages, consumers,
#                                             dead-lettered and unconfirmed (dlx)
#
# Node N is wjcN@localhost (WASMJOBS_CLUSTER_NODE, default wjc, names the nodes of
# another cluster beside this one), with its state in WASMJOBS_CLUSTER_DIR/nN (default
# /tmp/wasmjobs-cluster), AMQP on port WASMJOBS_CLUSTER_PORT+N-1 (default 5701, 5702,
# 5703) and Erlang distribution on that port + 20000: nothing shared with the single
# broker of scripts/rabbitmq.sh (5682). The nodes share one Erlang cookie, kept in
# WASMJOBS_CLUSTER_DIR/cookie. The first start of a directory makes a fresh cluster.
set -euo pipefail
. "$(dirname "$0")/rabbitmq-lib.sh"

D=${WASMJOBS_CLUSTER_DIR:-/tmp/wasmjobs-cluster}
BASE=${WASMJOBS_CLUSTER_PORT:-5701}
NODES=(1 2 3)
P=${WASMJOBS_CLUSTER_NODE:-wjc}

# node N sets node N's environment (call it in a subshell).
node() { rmq_env "$D/n$1" $((BASE + $1 - 1)) "$P$1@localhost"; }

cookie() {
  mkdir -p "$D"
  if [ ! -s "$D/cookie" ]; then
    (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F > "$D/cookie")
  fi
  cat "$D/cookie"
}

urls() {
  local out=""
  for n in "${NODES[@]}"; do
    out="$out${out:+,}$(node "$n" && rmq_url)"
  done
  echo "$out"
}

checknode() {
  case "${1:-}" in
    1|2|3) ;;
    *) echo "node number 1, 2 or 3 expected, got '${1:-}'" >&2; exit 2 ;;
  esac
}

start() {
  rmq_install
  local c pids=() n
  c=$(cookie)
  # In parallel: boot takes 4-8 s a node, and a node that was a cluster member waits at
  # boot for the members it last saw running.
  for n in "${NODES[@]}"; do
    (node "$n" && rmq_start "$c") &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  for n in 2 3; do
    (
      node "$n"
      if ! rmq_ctl cluster_status 2>/dev/null | grep -q "$P"'1@localhost'; then
        # One at a time: joins that race each other can leave a node out. The CLI's
        # chatter goes to a log, shown only when a step fails.
        for step in stop_app reset "join_cluster ${P}1@localhost" start_app; do
          # shellcheck disable=SC2086
          if ! rmq_ctl $step >"$D/join.log" 2>&1; then
            echo "$P$n@localhost: rabbitmqctl $step failed:" >&2
            cat "$D/join.log" >&2
            exit 1
          fi
        done
      fi
    )
  done
  urls
}

stop() {
  local pids=() n
  for n in "${NODES[@]}"; do
    (node "$n" && rmq_stop) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || true; done
}

# running prints the number of the first node that runs.
running() {
  local n
  for n in "${NODES[@]}"; do
    if (node "$n" && rmq_running); then echo "$n"; return; fi
  done
  echo "no node of the cluster runs" >&2
  exit 1
}

leader() {
  local running l
  running=$(running)
  l=$(node "$running" && rmq_ctl list_queues -q --no-table-headers name leader | awk -v q="$1" '$1 == q { print $2 }')
  case "$l" in
    "$P"[123]@localhost) echo "${l:${#P}:1}" ;;
    *) echo "no leader found for queue '$1' (got '$l')" >&2; exit 1 ;;
  esac
}

# queues QUEUE: the work queue, its dead letters and the delay queues holding messages.
# Each running node reports the queues it leads: a quorum queue's counts live on its
# leader, and another node reports them as 0. dlx counts what a quorum queue has
# dead-lettered and not yet seen confirmed by the next queue (at-least-once), which
# rabbitmqctl list_queues cannot show: hence eval.
queues() {
  local n
  echo "name messages ready unacked dlx consumers leader"
  for n in "${NODES[@]}"; do
    (node "$n" && rmq_running) || continue
    # shellcheck disable=SC2016
    (node "$n" && rmq_ctl eval '
      Keys = [messages, messages_ready, messages_unacknowledged, messages_dlx, consumers, leader],
      lists:foreach(fun(Q) ->
          {resource, _, queue, N} = amqqueue:get_name(Q),
          I = rabbit_amqqueue:info(Q, Keys),
          io:format("~ts~s~n", [N, [io_lib:format(" ~p", [proplists:get_value(K, I)]) || K <- Keys]])
        end, rabbit_amqqueue:list_local(<<"/">>)).') || true
  done | awk -v q="$1" '$1 == q || $1 == q ".dead" || ($1 ~ /\.delay(-quorum)?\./ && ($2 > 0 || $5 > 0))'
}

case "${1:-}" in
  install) rmq_install ;;
  start) start ;;
  stop) stop ;;
  url) urls ;;
  stop-node) checknode "${2:-}"; (node "$2" && rmq_stop) ;;
  start-node) checknode "${2:-}"; (node "$2" && rmq_start "$(cookie)") ;;
  leader) [ -n "${2:-}" ] || { echo "usage: $0 leader QUEUE" >&2; exit 2; }; leader "$2" ;;
  queues) [ -n "${2:-}" ] || { echo "usage: $0 queues QUEUE" >&2; exit 2; }; queues "$2" ;;
  *) echo "usage: $0 install|start|stop|url|stop-node N|start-node N|leader QUEUE|queues QUEUE" >&2; exit 2 ;;
esac
