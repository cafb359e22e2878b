# Shared by scripts/rabbitmq.sh and scripts/rabbitmq-cluster.sh (sourced, not run): one
# RabbitMQ node of Debian's package on loopback, as root, without systemd, all of its
# state under one directory.
#
# rmq_env DIR PORT NODE sets the environment of a node (in the calling shell: call it in
# a subshell to handle several nodes); the other functions act on the node it set.

RMQ_BIN=/usr/lib/rabbitmq/bin

# rmq_env DIR PORT NODE: state under DIR, AMQP on PORT, Erlang distribution on
# PORT+20000, node name NODE. HOME is DIR: the Erlang cookie is DIR/.erlang.cookie, read
# by the node and by rabbitmqctl alike.
rmq_env() {
  RMQ_DIR=$1 RMQ_PORT=$2 RMQ_NODE=$3
  export HOME="$RMQ_DIR" RABBITMQ_NODENAME="$RMQ_NODE" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$RMQ_PORT" RABBITMQ_DIST_PORT=$((RMQ_PORT + 20000)) \
    RABBITMQ_MNESIA_BASE="$RMQ_DIR/mnesia" RABBITMQ_LOG_BASE="$RMQ_DIR/log" \
    RABBITMQ_PID_FILE="$RMQ_DIR/rabbit.pid" RABBITMQ_ENABLED_PLUGINS_FILE="$RMQ_DIR/enabled_plugins" \
    RABBITMQ_CONFIG_FILE="$RMQ_DIR/rabbitmq" RABBITMQ_ADVANCED_CONFIG_FILE="$RMQ_DIR/advanced.config" \
    RABBITMQ_CONF_ENV_FILE="$RMQ_DIR/rabbitmq-env.conf"
}

rmq_url() { echo "amqp://guest:guest@127.0.0.1:${RMQ_PORT}/"; }

rmq_ctl() { "$RMQ_BIN/rabbitmqctl" -n "$RMQ_NODE" "$@"; }

# rmq_install installs the Debian package if it is missing.
rmq_install() {
  if [ ! -x "$RMQ_BIN/rabbitmq-server" ]; then
    echo "installing rabbitmq-server" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server >&2
  fi
}

rmq_running() { rmq_ctl status >/dev/null 2>&1; }

# rmq_start [COOKIE] starts the node unless it runs, and waits until it is ready. With
# COOKIE, the node's Erlang cookie is set to it first (nodes of a cluster share one).
rmq_start() {
  mkdir -p "$RMQ_DIR/log" "$RMQ_DIR/mnesia"
  echo '[].' > "$RMQ_DIR/enabled_plugins"
  [ -f "$RMQ_DIR/rabbitmq.conf" ] || printf 'loopback_users = none\nlog.console = false\n' > "$RMQ_DIR/rabbitmq.conf"
  [ -f "$RMQ_DIR/rabbitmq-env.conf" ] || : > "$RMQ_DIR/rabbitmq-env.conf"
  # A quorum queue dead-letters at least once (the delay chain): a message whose next
  # queue never confirms it, as when that queue's leader stops mid-publish, is sent
  # again only after dead_letter_worker_publisher_confirm_timeout, 3 minutes by default
  # (and rabbitmq.conf has no key for it in 3.10). The README asks operators of quorum
  # queues for the same setting.
  cat > "$RMQ_DIR/advanced.config" <<'CONFIG'
[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 5000}]}].
CONFIG
  if [ -n "${1:-}" ] && [ "$(cat "$RMQ_DIR/.erlang.cookie" 2>/dev/null)" != "$1" ]; then
    rm -f "$RMQ_DIR/.erlang.cookie"
    (umask 077 && printf '%s' "$1" > "$RMQ_DIR/.erlang.cookie")
    chmod 400 "$RMQ_DIR/.erlang.cookie"
  fi
  if rmq_running; then
    return
  fi
  "$RMQ_BIN/rabbitmq-server" -detached >&2
  # await_startup right after -detached fails; wait on the pid file first.
  rmq_ctl wait --timeout 90 "$RMQ_DIR/rabbit.pid" >/dev/null
  rmq_ctl await_startup --timeout 90 >/dev/null
}

# rmq_stop stops the node if it runs; its durable state stays.
rmq_stop() {
  if rmq_running; then
    rmq_ctl stop "$RMQ_DIR/rabbit.pid" >/dev/null
  fi
}
