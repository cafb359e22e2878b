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
# need a directory, a port and a node name each.
set -euo pipefail

D=${WASMJOBS_RABBIT_DIR:-/tmp/wasmjobs-rabbitmq}
PORT=${WASMJOBS_RABBIT_PORT:-5682}
NODE=${WASMJOBS_RABBIT_NODE:-wasmjobs-test@localhost}
URL="amqp://guest:guest@127.0.0.1:${PORT}/"

export HOME="$D" RABBITMQ_NODENAME="$NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
  RABBITMQ_NODE_PORT="$PORT" RABBITMQ_DIST_PORT=$((PORT + 20000)) \
  RABBITMQ_MNESIA_BASE="$D/mnesia" RABBITMQ_LOG_BASE="$D/log" RABBITMQ_PID_FILE="$D/rabbit.pid" \
  RABBITMQ_ENABLED_PLUGINS_FILE="$D/enabled_plugins" RABBITMQ_CONFIG_FILE="$D/rabbitmq" \
  RABBITMQ_ADVANCED_CONFIG_FILE="$D/advanced.config" RABBITMQ_CONF_ENV_FILE="$D/rabbitmq-env.conf"

ctl() { /usr/lib/rabbitmq/bin/rabbitmqctl -n "$NODE" "$@"; }

install() {
  if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    echo "installing rabbitmq-server" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >&2
  fi
}

start() {
  install
  mkdir -p "$D/log" "$D/mnesia"
  : > "$D/enabled_plugins.tmp" && echo '[].' > "$D/enabled_plugins" && rm -f "$D/enabled_plugins.tmp"
  [ -f "$D/rabbitmq.conf" ] || printf 'loopback_users = none\nlog.console = false\n' > "$D/rabbitmq.conf"
  [ -f "$D/rabbitmq-env.conf" ] || : > "$D/rabbitmq-env.conf"
  if ctl status >/dev/null 2>&1; then
    echo "$URL"
    return
  fi
  /usr/lib/rabbitmq/bin/rabbitmq-server -detached >&2
  # await_startup right after -detached fails; wait on the pid file first.
  ctl wait --timeout 90 "$D/rabbit.pid" >/dev/null
  ctl await_startup --timeout 90 >/dev/null
  echo "$URL"
}

stop() {
  if ctl status >/dev/null 2>&1; then
    ctl stop "$D/rabbit.pid" >/dev/null
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  url) echo "$URL" ;;
  *) echo "usage: $0 start|stop|restart|url" >&2; exit 2 ;;
esac
