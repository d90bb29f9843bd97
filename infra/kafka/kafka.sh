#!/usr/bin/env bash
# memstream: local single-node Apache Kafka (KRaft, combined broker+controller,
# loopback only), built from Maven Central jars -- no tarball, no Docker.
#
# Usage: infra/kafka/kafka.sh {fetch|start|stop|restart|status|logs}
#
# Environment:
#   MEMSTREAM_KAFKA_VERSION   Kafka version (default: <kafka.version> in pom.xml)
#   MEMSTREAM_CACHE_DIR       jar cache root   (default: ~/.cache/memstream)
#   MEMSTREAM_KAFKA_DATA      data dir         (default: <repo>/.data/kafka)
#   MEMSTREAM_KAFKA_PORT      client port      (default: 9092; controller = port+1)
#   MEMSTREAM_KAFKA_HEAP      JVM heap opts    (default: -Xms256m -Xmx512m)
#   MEMSTREAM_KAFKA_TIMEOUT   start readiness timeout, seconds (default: 90)
#   MEMSTREAM_KAFKA_SECURITY  PLAINTEXT (default) or SASL_SSL: SCRAM-SHA-512 over TLS, which needs
#     MEMSTREAM_KAFKA_TLS_KEYSTORE  PEM: the broker's private key (PKCS#8) and certificate chain
#     MEMSTREAM_KAFKA_TLS_CA        PEM: the CA that signed it (the broker trusts it for itself)
#     MEMSTREAM_KAFKA_SCRAM_USERS   name:password[,name:password...]; the first one is the broker's
#                                   own (inter-broker) user. Users are created when the data dir is
#                                   formatted, i.e. on its first start.
#   JAVA_HOME                 JDK/JRE to use (Java 17+; default: java on PATH)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
POM="$SCRIPT_DIR/pom.xml"

pom_version() {
    sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM" | head -n1
}

KAFKA_VERSION="${MEMSTREAM_KAFKA_VERSION:-$(pom_version)}"
CACHE_ROOT="${MEMSTREAM_CACHE_DIR:-$HOME/.cache/memstream}"
KAFKA_HOME="$CACHE_ROOT/kafka/$KAFKA_VERSION"
LIBS="$KAFKA_HOME/libs"
PROBE_DIR="$KAFKA_HOME/probe"
DATA_DIR="${MEMSTREAM_KAFKA_DATA:-$REPO_ROOT/.data/kafka}"
PORT="${MEMSTREAM_KAFKA_PORT:-9092}"
CONTROLLER_PORT="$((PORT + 1))"
HEAP_OPTS="${MEMSTREAM_KAFKA_HEAP:--Xms256m -Xmx512m}"
START_TIMEOUT="${MEMSTREAM_KAFKA_TIMEOUT:-90}"
SECURITY="${MEMSTREAM_KAFKA_SECURITY:-PLAINTEXT}"
TLS_KEYSTORE="${MEMSTREAM_KAFKA_TLS_KEYSTORE:-}"
TLS_CA="${MEMSTREAM_KAFKA_TLS_CA:-}"
SCRAM_USERS="${MEMSTREAM_KAFKA_SCRAM_USERS:-}"

PID_FILE="$DATA_DIR/kafka.pid"
OUT_FILE="$DATA_DIR/kafka.out"          # JVM stdout/stderr
LOG_DIR="$DATA_DIR/logs"                # log4j server.log, controller.log, ...
LOG_DIRS="$DATA_DIR/data"               # Kafka log.dirs (topic data + KRaft metadata)
CONF="$DATA_DIR/server.properties"
LOG4J_CONF="$DATA_DIR/log4j2.properties"
CLUSTER_ID_FILE="$DATA_DIR/cluster.id"
CLIENT_CONF="$DATA_DIR/client.properties"  # what the readiness probe connects with

if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    JAVA="$JAVA_HOME/bin/java"
    JAVAC="$JAVA_HOME/bin/javac"
else
    JAVA="java"
    JAVAC="javac"
fi

log() { echo "kafka.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# --------------------------------------------------------------------- fetch
fetch() {
    if [[ -f "$LIBS/.complete" ]]; then
        log "jars for Kafka $KAFKA_VERSION already in $LIBS"
        return 0
    fi
    command -v mvn >/dev/null || die "mvn not found (needed once to fetch Kafka jars)"
    log "fetching Kafka $KAFKA_VERSION jars from Maven Central into $LIBS"
    mkdir -p "$KAFKA_HOME"
    local tmp
    tmp="$(mktemp -d "$KAFKA_HOME/libs.tmp.XXXXXX")"
    local out
    if ! out="$(mvn -q -B -Dstyle.color=never -f "$POM" \
            -Dkafka.version="$KAFKA_VERSION" \
            dependency:copy-dependencies \
            -DincludeScope=runtime \
            -DoutputDirectory="$tmp" 2>&1)"; then
        echo "$out" >&2
        rm -rf "$tmp"
        die "mvn dependency:copy-dependencies failed for Kafka $KAFKA_VERSION"
    fi
    [[ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ]] || { rm -rf "$tmp"; die "kafka_2.13-$KAFKA_VERSION.jar missing after fetch"; }
    touch "$tmp/.complete"
    rm -rf "$LIBS"
    mv "$tmp" "$LIBS"
    log "fetched $(find "$LIBS" -name '*.jar' | wc -l) jars ($(du -sh "$LIBS" | cut -f1))"
}

# Compile the readiness probe (once per Kafka version / probe source change).
ensure_probe() {
    local src="$SCRIPT_DIR/KafkaReady.java"
    if [[ ! -f "$PROBE_DIR/KafkaReady.class" || "$src" -nt "$PROBE_DIR/KafkaReady.class" ]]; then
        mkdir -p "$PROBE_DIR"
        "$JAVAC" -nowarn --release 17 -cp "$LIBS/*" -d "$PROBE_DIR" "$src" >&2 \
            || die "failed to compile $src (needs a JDK; set JAVA_HOME)"
    fi
}

# ------------------------------------------------------------ process helpers
broker_pid() {
    # Prints the broker pid if it is running (and really is our Kafka), else fails.
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka' || return 1
    echo "$pid"
}

port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

SERVER_LOG_OFFSET=0   # size of server.log when this start began (tail only new lines)

log_tail() {
    if [[ -s "$OUT_FILE" ]]; then
        echo "----- tail $OUT_FILE -----" >&2
        tail -n 40 "$OUT_FILE" >&2
    fi
    local new=""
    if [[ -s "$LOG_DIR/server.log" ]]; then
        new="$(tail -c +"$((SERVER_LOG_OFFSET + 1))" "$LOG_DIR/server.log" | tail -n 40 | cut -c1-400)"
    fi
    if [[ -n "$new" ]]; then
        echo "----- tail $LOG_DIR/server.log (this start) -----" >&2
        echo "$new" >&2
    fi
}

# -------------------------------------------------------------------- config
check_security() {
    case "$SECURITY" in
        PLAINTEXT) ;;
        SASL_SSL)
            [[ -r "$TLS_KEYSTORE" ]] || die "SASL_SSL needs MEMSTREAM_KAFKA_TLS_KEYSTORE (a readable PEM file)"
            [[ -r "$TLS_CA" ]] || die "SASL_SSL needs MEMSTREAM_KAFKA_TLS_CA (a readable PEM file)"
            [[ "$SCRAM_USERS" == *:* ]] || die "SASL_SSL needs MEMSTREAM_KAFKA_SCRAM_USERS=name:password[,...]"
            ;;
        *) die "MEMSTREAM_KAFKA_SECURITY must be PLAINTEXT or SASL_SSL, not $SECURITY" ;;
    esac
}

broker_user() { echo "${SCRAM_USERS%%,*}" | cut -d: -f1; }
broker_password() { echo "${SCRAM_USERS%%,*}" | cut -d: -f2-; }

scram_jaas() {
    echo "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$(broker_user)\" password=\"$(broker_password)\";"
}

listener_config() {
    if [[ "$SECURITY" == PLAINTEXT ]]; then
        echo "listeners=PLAINTEXT://127.0.0.1:${PORT},CONTROLLER://127.0.0.1:${CONTROLLER_PORT}"
        echo "advertised.listeners=PLAINTEXT://127.0.0.1:${PORT}"
        echo "inter.broker.listener.name=PLAINTEXT"
        echo "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        return
    fi
    echo "listeners=SASL_SSL://127.0.0.1:${PORT},CONTROLLER://127.0.0.1:${CONTROLLER_PORT}"
    echo "advertised.listeners=SASL_SSL://127.0.0.1:${PORT}"
    echo "inter.broker.listener.name=SASL_SSL"
    echo "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL"
    echo "sasl.enabled.mechanisms=SCRAM-SHA-512"
    echo "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512"
    echo "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$(scram_jaas)"
    echo "ssl.keystore.type=PEM"
    echo "ssl.keystore.location=${TLS_KEYSTORE}"
    echo "ssl.truststore.type=PEM"
    echo "ssl.truststore.location=${TLS_CA}"
}

write_client_config() {
    if [[ "$SECURITY" == PLAINTEXT ]]; then
        echo "security.protocol=PLAINTEXT" >"$CLIENT_CONF"
        return
    fi
    {
        echo "security.protocol=SASL_SSL"
        echo "sasl.mechanism=SCRAM-SHA-512"
        echo "sasl.jaas.config=$(scram_jaas)"
        echo "ssl.truststore.type=PEM"
        echo "ssl.truststore.location=${TLS_CA}"
    } >"$CLIENT_CONF"
    chmod 600 "$CLIENT_CONF"
}

write_config() {
    check_security
    mkdir -p "$DATA_DIR" "$LOG_DIR" "$LOG_DIRS"
    cat >"$CONF" <<EOF
# Generated by infra/kafka/kafka.sh on every start -- edit the script, not this file.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:${CONTROLLER_PORT}
controller.listener.names=CONTROLLER
$(listener_config)

log.dirs=${LOG_DIRS}

num.partitions=4
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=true
delete.topic.enable=true

offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0

# memstream keeps the original bytes of rejected messages on the dead-letter topic: allow large ones.
message.max.bytes=16777216
replica.fetch.max.bytes=16777216
socket.request.max.bytes=104857600

# Small machine: fewer threads than the defaults.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4

log.retention.hours=168
log.segment.bytes=134217728
EOF
    chmod 600 "$CONF"
    write_client_config

    cat >"$LOG4J_CONF" <<EOF
# Generated by infra/kafka/kafka.sh
status = warn
name = memstream-kafka
appender.server.type = RollingFile
appender.server.name = SERVER
appender.server.fileName = ${LOG_DIR}/server.log
appender.server.filePattern = ${LOG_DIR}/server.log.%i
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
appender.server.policies.type = Policies
appender.server.policies.size.type = SizeBasedTriggeringPolicy
appender.server.policies.size.size = 20MB
appender.server.strategy.type = DefaultRolloverStrategy
appender.server.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.server.ref = SERVER
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.request.additivity = false
logger.request.appenderRef.server.ref = SERVER
EOF
}

format_storage() {
    if [[ -f "$LOG_DIRS/meta.properties" ]]; then
        return 0   # already formatted; keep data
    fi
    local cid
    if [[ -s "$CLUSTER_ID_FILE" ]]; then
        cid="$(cat "$CLUSTER_ID_FILE")"
    else
        cid="$("$JAVA" -cp "$LIBS/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n1)"
        [[ -n "$cid" ]] || die "could not generate a cluster id"
        echo "$cid" >"$CLUSTER_ID_FILE"
    fi
    log "formatting $LOG_DIRS (cluster id $cid)"
    local scram=() users=() user
    if [[ "$SECURITY" == SASL_SSL ]]; then
        IFS=, read -ra users <<<"$SCRAM_USERS"
        for user in "${users[@]}"; do
            scram+=(--add-scram "SCRAM-SHA-512=[name=${user%%:*},password=${user#*:}]")
        done
    fi
    "$JAVA" -Dlog4j2.configurationFile="$LOG4J_CONF" -cp "$LIBS/*" \
        kafka.tools.StorageTool format -t "$cid" -c "$CONF" --ignore-formatted "${scram[@]}" >&2 \
        || die "kafka-storage format failed"
}

# --------------------------------------------------------------------- start
start() {
    fetch
    ensure_probe
    mkdir -p "$DATA_DIR"
    exec 9>"$DATA_DIR/.lock"
    flock 9

    local pid
    if pid="$(broker_pid)"; then
        log "already running (pid $pid) on 127.0.0.1:$PORT"
        wait_ready "$pid"
        return 0
    fi
    rm -f "$PID_FILE"
    if port_open "$PORT" || port_open "$CONTROLLER_PORT"; then
        die "port $PORT or $CONTROLLER_PORT on 127.0.0.1 is already in use by another process"
    fi

    write_config
    format_storage

    SERVER_LOG_OFFSET="$(stat -c %s "$LOG_DIR/server.log" 2>/dev/null || echo 0)"
    log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$PORT (data: $DATA_DIR)"
    # shellcheck disable=SC2086
    nohup setsid "$JAVA" \
        $HEAP_OPTS \
        -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
        -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError \
        -Djava.awt.headless=true \
        -Dkafka.logs.dir="$LOG_DIR" \
        -Dlog4j2.configurationFile="$LOG4J_CONF" \
        -cp "$LIBS/*" \
        kafka.Kafka "$CONF" \
        >"$OUT_FILE" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$PID_FILE"
    wait_ready "$pid"
}

wait_ready() {
    local pid="$1" t0=$SECONDS
    "$JAVA" -Xmx64m -XX:TieredStopAtLevel=1 -cp "$LIBS/*:$PROBE_DIR" \
        KafkaReady "127.0.0.1:$PORT" "$START_TIMEOUT" "$pid" "$CLIENT_CONF" >&2 || {
        log "broker not ready after $((SECONDS - t0))s"
        log_tail
        if kill -0 "$pid" 2>/dev/null; then
            log "broker process $pid still alive; stopping it"
            stop || true
        fi
        exit 1
    }
    log "ready on 127.0.0.1:$PORT (pid $pid)"
}

# ---------------------------------------------------------------------- stop
stop() {
    local pid
    if ! pid="$(broker_pid)"; then
        log "not running"
        rm -f "$PID_FILE"
        return 0
    fi
    log "stopping pid $pid (SIGTERM)"
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 60; i++)); do          # up to 30 s for a clean shutdown
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "still alive after 30s; SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$PID_FILE"
    log "stopped"
}

status() {
    local pid
    if pid="$(broker_pid)"; then
        echo "running (pid $pid, 127.0.0.1:$PORT, Kafka $KAFKA_VERSION, data $DATA_DIR)"
    else
        echo "not running"
        return 3
    fi
}

usage() {
    echo "usage: $0 {fetch|start|stop|restart|status|logs}" >&2
    exit 2
}

case "${1:-}" in
    fetch) fetch ;;
    start) start ;;
    stop)
        mkdir -p "$DATA_DIR"
        exec 9>"$DATA_DIR/.lock"
        flock 9
        stop
        ;;
    restart) "$SCRIPT_DIR/kafka.sh" stop && "$SCRIPT_DIR/kafka.sh" start ;;
    status) status ;;
    logs) tail -n "${2:-100}" "$LOG_DIR/server.log" ;;
    *) usage ;;
esac
