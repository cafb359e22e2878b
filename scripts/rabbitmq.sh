#!/usr/bin/env bash
# A throwaway RabbitMQ broker on loopback for the tests: run as root, without systemd.
#
#   scripts/rabbitmq.sh start     install (apt-get) if missing, start, wait until ready,
#                                 print the broker's URL
#   scripts/rabbitmq.sh stop      stop it
#   scripts/rabbitmq.sh restart   stop and start it again (its durable state survives)
#   scripts/rabbitmq.sh url       print the URL (export it as WASMJOBS_AMQP_URL)
#
# State lives in WASMJOBS_RABBIT_DIR (default /tmp/wasmjobs-rabbitmq); the AMQP port is
# WASMJOBS_RABBIT_PORT (default 5682, so as not to clash with a broker on 5672; Erlang
# distribution takes that port + 20000). Ports 35672-35682 are RabbitMQ's CLI tools'. The node
# name is WASMJOBS_RABBIT_NODE (default wasmjobs-test@localhost): two brokers side by side
# need a directory, a port and a node name each. scripts/rabbitmq-cluster.sh starts a
# three-node cluster the same way.
set -euo pipefail
. "$(dirname "$0")/rabbitmq-lib.sh"

rmq_env "${WASMJOBS_RABBIT_DIR:-/tmp/wasmjobs-rabbitmq}" "${WASMJOBS_RABBIT_PORT:-5682}" \
  "${WASMJOBS_RABBIT_NODE:-wasmjobs-test@localhost}"

start() {
  rmq_install
  rmq_start
  rmq_url
}

case "${1:-}" in
  start) start ;;
  stop) rmq_stop ;;
  restart) rmq_stop; start ;;
  url) rmq_url ;;
  *) echo "usage: $0 start|stop|restart|url" >&2; exit 2 ;;
esac
