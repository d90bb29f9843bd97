#!/usr/bin/env bash
# memstream: local Apache Kafka (KRaft, combined broker+controller nodes, loopback only), built from
# Maven Central jars -- no tarball, no Docker. One broker by default; a cluster of N on request.
#
# Usage: infra/kafka/kafka.sh [--brokers N] {fetch|start|stop|restart|status|logs [LINES]|bootstrap}
#        infra/kafka/kafka.sh [--brokers N] configs ARGS...   (kafka-configs against it: quotas, configs)
#        infra/kafka/kafka.sh [--brokers N] {kill-node I|start-node I|node-pid I}   (clusters)
#
# One broker (the default): 127.0.0.1:$MEMSTREAM_KAFKA_PORT (9092), controller on port+1, data in
# <repo>/.data/kafka, replication factor 1.
#
# A cluster (--brokers N or MEMSTREAM_KAFKA_BROKERS=N, N > 1): N combined broker+controller nodes,
# node.id 1..N, all of them voters of one KRaft quorum, one cluster id, each node formatted once.
#   node I: client port  BASE + 2*(I-1)   (BASE = MEMSTREAM_KAFKA_PORT, default 19092 for a cluster)
#           controller   BASE + 2*(I-1) + 1
#           data, logs, pid file, config   $DATA/node-I/   (DATA default: <repo>/.data/kafka-cluster)
#   so 3 brokers answer on 127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096 (`bootstrap` prints it).
#   N >= 3: default.replication.factor=3 and min.insync.replicas=2 (also for the offsets, transaction
#   and share-coordinator topics); N = 2: 2 and 1. $DATA/cluster.layout records N and BASE at the first
#   start: later calls with MEMSTREAM_KAFKA_DATA=$DATA need no --brokers, and other values are refused.
#   `start` waits until every broker answers and sees all N live, and creates __consumer_offsets
#   (so consumer groups work while a broker is down later). `kill-node I` kills node I's JVM (kill -9),
#   `start-node I` starts it again on its storage and waits until it is back, `node-pid I` prints its pid.
#   SASL_SSL is single-node only.
#
# Environment:
#   MEMSTREAM_KAFKA_VERSION   Kafka version (default: <kafka.version> in pom.xml)
#   MEMSTREAM_CACHE_DIR       jar cache root   (default: ~/.cache/memstream)
#   MEMSTREAM_KAFKA_BROKERS   number of brokers (default: 1; --brokers N wins)
#   MEMSTREAM_KAFKA_DATA      data dir         (default: <repo>/.data/kafka; a cluster: <repo>/.data/kafka-cluster)
#   MEMSTREAM_KAFKA_PORT      client port      (default: 9092; controller = port+1; a cluster: base port, 19092)
#   MEMSTREAM_KAFKA_HEAP      JVM heap opts    (default: -Xms256m -Xmx512m; per broker of a cluster: -Xms128m -Xmx384m)
#   MEMSTREAM_KAFKA_JIT       c1 or c2         (default: c1 for a single broker, c2 for a cluster's; see below)
#   MEMSTREAM_KAFKA_TIMEOUT   start readiness timeout, seconds (default: 90)
#   MEMSTREAM_KAFKA_ADVERTISED_PORT  one PLAINTEXT broker only: advertise 127.0.0.1:THIS instead of its
#                             own port (default: unset, its own port), for a TCP proxy in front of it
#                             (bench chaos --network-faults): clients that bootstrap through the proxy
#                             stay on it. The proxy must forward to the broker's port before `start`:
#                             the readiness probe (and the broker itself) connect to what it advertises.
#   MEMSTREAM_KAFKA_SECURITY  PLAINTEXT (default) or SASL_SSL: SCRAM-SHA-512 over TLS, which needs
#     MEMSTREAM_KAFKA_TLS_KEYSTORE  PEM: the broker's private key (PKCS#8) and certificate chain
#     MEMSTREAM_KAFKA_TLS_CA        PEM: the CA that signed it (the broker trusts it for itself)
#     MEMSTREAM_KAFKA_SCRAM_USERS   name:password[,name:password...]; the first one is the broker's
#                                   own (inter-broker) user. Users are created when the data dir is
#                                   formatted, i.e. on its first start.
#   JAVA_HOME                 JDK/JRE to use (Java 17+; default: java on PATH)
set -euo pipefail

# shellcheck source=../lib/service.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/service.sh" kafka.sh
POM="$SCRIPT_DIR/pom.xml"

usage() {
    echo "usage: $0 [--brokers N] {fetch|start|stop|restart|status|logs [LINES]|bootstrap|configs ARGS...|kill-node I|start-node I|node-pid I}" >&2
    exit 2
}

# Options may come before or after the verb.
BROKERS_OPT=""
POSITIONAL=()
while (($#)); do
    case "$1" in
        --brokers) [[ $# -ge 2 ]] || usage; BROKERS_OPT="$2"; shift 2 ;;
        --brokers=*) BROKERS_OPT="${1#*=}"; shift ;;
        *) POSITIONAL+=("$1"); shift ;;
    esac
done
set -- "${POSITIONAL[@]+"${POSITIONAL[@]}"}"

pom_version() {
    sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM" | head -n1
}

layout_value() {  # layout_value FILE KEY: a value recorded in a cluster.layout file
    [[ -s "$1" ]] || return 0
    sed -n "s/^$2=//p" "$1" | head -n1
}

# How many brokers: the option, the variable, else what the data dir was made for, else one.
BROKERS="${BROKERS_OPT:-${MEMSTREAM_KAFKA_BROKERS:-}}"
if [[ -z "$BROKERS" && -n "${MEMSTREAM_KAFKA_DATA:-}" && -s "$MEMSTREAM_KAFKA_DATA/cluster.layout" ]]; then
    BROKERS="$(layout_value "$MEMSTREAM_KAFKA_DATA/cluster.layout" brokers)"
fi
BROKERS="${BROKERS:-1}"
[[ "$BROKERS" =~ ^[1-9][0-9]*$ ]] && ((BROKERS <= 9)) || die "--brokers must be a number from 1 to 9, not '$BROKERS'"

KAFKA_VERSION="${MEMSTREAM_KAFKA_VERSION:-$(pom_version)}"
CACHE_ROOT="${MEMSTREAM_CACHE_DIR:-$HOME/.cache/memstream}"
KAFKA_HOME="$CACHE_ROOT/kafka/$KAFKA_VERSION"
LIBS="$KAFKA_HOME/libs"
PROBE_DIR="$KAFKA_HOME/probe"
START_TIMEOUT="${MEMSTREAM_KAFKA_TIMEOUT:-90}"
SECURITY="${MEMSTREAM_KAFKA_SECURITY:-PLAINTEXT}"
TLS_KEYSTORE="${MEMSTREAM_KAFKA_TLS_KEYSTORE:-}"
TLS_CA="${MEMSTREAM_KAFKA_TLS_CA:-}"
SCRAM_USERS="${MEMSTREAM_KAFKA_SCRAM_USERS:-}"
ADVERTISED_PORT="${MEMSTREAM_KAFKA_ADVERTISED_PORT:-}"

if ((BROKERS == 1)); then
    DATA_DIR="$(absolute "${MEMSTREAM_KAFKA_DATA:-$REPO_ROOT/.data/kafka}")"
    BASE_PORT="${MEMSTREAM_KAFKA_PORT:-9092}"
    HEAP_OPTS="${MEMSTREAM_KAFKA_HEAP:--Xms256m -Xmx512m}"
    # A development broker (the demo, tests): the C1 compiler only. At this size C2's compiling is much
    # of a broker's CPU: 2.6 CPU-seconds to ready against 4.2, and 4.9 against 7.8 after 20,000
    # messages and 30 s idle. A cluster keeps C2: the benches measure its brokers under load.
    JIT="${MEMSTREAM_KAFKA_JIT:-c1}"
    REPLICATION=1
    MIN_ISR=1
else
    [[ "$SECURITY" == PLAINTEXT ]] \
        || die "MEMSTREAM_KAFKA_SECURITY=$SECURITY is single-node only: a cluster (--brokers $BROKERS) is PLAINTEXT"
    DATA_DIR="$(absolute "${MEMSTREAM_KAFKA_DATA:-$REPO_ROOT/.data/kafka-cluster}")"
    LAYOUT_FILE="$DATA_DIR/cluster.layout"
    recorded_port="$(layout_value "$LAYOUT_FILE" base_port)"
    BASE_PORT="${MEMSTREAM_KAFKA_PORT:-${recorded_port:-19092}}"
    recorded_brokers="$(layout_value "$LAYOUT_FILE" brokers)"
    if [[ -n "$recorded_brokers" && "$recorded_brokers" != "$BROKERS" ]]; then
        die "$DATA_DIR holds a cluster of $recorded_brokers brokers, not $BROKERS (another MEMSTREAM_KAFKA_DATA, or remove it)"
    fi
    if [[ -n "$recorded_port" && "$recorded_port" != "$BASE_PORT" ]]; then
        die "$DATA_DIR holds a cluster on base port $recorded_port, not $BASE_PORT"
    fi
    HEAP_OPTS="${MEMSTREAM_KAFKA_HEAP:--Xms128m -Xmx384m}"
    JIT="${MEMSTREAM_KAFKA_JIT:-c2}"
    if ((BROKERS >= 3)); then REPLICATION=3; MIN_ISR=2; else REPLICATION=$BROKERS; MIN_ISR=1; fi
fi
case "$JIT" in
    c1) JIT_OPTS="-XX:TieredStopAtLevel=1" ;;
    c2) JIT_OPTS="" ;;
    *) die "MEMSTREAM_KAFKA_JIT is c1 or c2, not '$JIT'" ;;
esac
[[ "$BASE_PORT" =~ ^[0-9]+$ ]] && ((BASE_PORT + 2 * BROKERS <= 65535)) || die "bad port '$BASE_PORT'"
if [[ -n "$ADVERTISED_PORT" ]]; then
    ((BROKERS == 1)) && [[ "$SECURITY" == PLAINTEXT ]] \
        || die "MEMSTREAM_KAFKA_ADVERTISED_PORT is for one PLAINTEXT broker only"
    [[ "$ADVERTISED_PORT" =~ ^[0-9]+$ ]] && ((ADVERTISED_PORT <= 65535)) || die "bad port '$ADVERTISED_PORT'"
fi

CLUSTER_ID_FILE="$DATA_DIR/cluster.id"
CLIENT_CONF="$DATA_DIR/client.properties"  # what the readiness probe connects with

node_port() { echo $((BASE_PORT + 2 * ($1 - 1))); }

# The paths and ports of node $1 (for one broker: the data dir itself, as it always was).
select_node() {
    NODE_ID="$1"
    ((NODE_ID >= 1 && NODE_ID <= BROKERS)) || die "no node $NODE_ID (nodes 1..$BROKERS)"
    if ((BROKERS == 1)); then
        NODE_DIR="$DATA_DIR"
    else
        NODE_DIR="$DATA_DIR/node-$NODE_ID"
    fi
    PORT="$(node_port "$NODE_ID")"
    CONTROLLER_PORT="$((PORT + 1))"
    PID_FILE="$NODE_DIR/kafka.pid"
    OUT_FILE="$NODE_DIR/kafka.out"          # JVM stdout/stderr
    LOG_DIR="$NODE_DIR/logs"                # log4j server.log, controller.log, ...
    LOG_DIRS="$NODE_DIR/data"               # Kafka log.dirs (topic data + KRaft metadata)
    CONF="$NODE_DIR/server.properties"
    LOG4J_CONF="$NODE_DIR/log4j2.properties"
}
select_node 1

all_nodes() { seq 1 "$BROKERS"; }

bootstrap_servers() {
    local i out=()
    for i in $(all_nodes); do out+=("127.0.0.1:$(node_port "$i")"); done
    (IFS=,; echo "${out[*]}")
}

quorum_voters() {
    local i out=()
    for i in $(all_nodes); do out+=("$i@127.0.0.1:$(($(node_port "$i") + 1))"); done
    (IFS=,; echo "${out[*]}")
}

if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    JAVA="$JAVA_HOME/bin/java"
    JAVAC="$JAVA_HOME/bin/javac"
else
    JAVA="java"
    JAVAC="javac"
fi

# --------------------------------------------------------------------- fetch
fetch() {
    # The admin tools came later than the broker's jars: a cache without them is fetched again.
    if [[ -f "$LIBS/.complete" && -f "$LIBS/kafka-tools-$KAFKA_VERSION.jar" ]]; then
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
# Prints the selected node's pid if it is running (and really is our Kafka), else fails.
broker_pid() { pidfile_alive_as "$PID_FILE" 'kafka\.Kafka'; }

port_open() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

lock_data_dir() {
    mkdir -p "$DATA_DIR"
    exec 9>"$DATA_DIR/.lock"
    flock 9
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
        echo "advertised.listeners=PLAINTEXT://127.0.0.1:${ADVERTISED_PORT:-$PORT}"
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

# Small machine: fewer threads than Kafka's defaults; fewer again for each broker of a cluster
# (several JVMs share the cores).
thread_config() {
    if ((BROKERS == 1)); then
        echo "num.network.threads=2"
        echo "num.io.threads=4"
        echo "num.recovery.threads.per.data.dir=1"
        echo "background.threads=4"
        return
    fi
    echo "num.network.threads=2"
    echo "num.io.threads=2"
    echo "num.recovery.threads.per.data.dir=1"
    echo "background.threads=2"
    echo "num.replica.fetchers=1"
    echo "log.cleaner.threads=1"
    echo "# Internal topics: 10 partitions, not 50 (each has ${REPLICATION} replicas here)."
    echo "offsets.topic.num.partitions=10"
    echo "transaction.state.log.num.partitions=10"
    echo "share.coordinator.state.topic.num.partitions=10"
}

write_config() {
    check_security
    mkdir -p "$NODE_DIR" "$LOG_DIR" "$LOG_DIRS"
    cat >"$CONF" <<EOF
# Generated by infra/kafka/kafka.sh on every start -- edit the script, not this file.
process.roles=broker,controller
node.id=${NODE_ID}
controller.quorum.voters=$(quorum_voters)
controller.listener.names=CONTROLLER
$(listener_config)

log.dirs=${LOG_DIRS}

num.partitions=4
default.replication.factor=${REPLICATION}
min.insync.replicas=${MIN_ISR}
auto.create.topics.enable=true
delete.topic.enable=true

offsets.topic.replication.factor=${REPLICATION}
transaction.state.log.replication.factor=${REPLICATION}
transaction.state.log.min.isr=${MIN_ISR}
share.coordinator.state.topic.replication.factor=${REPLICATION}
share.coordinator.state.topic.min.isr=${MIN_ISR}
group.initial.rebalance.delay.ms=0

# memstream keeps the original bytes of rejected messages on the dead-letter topic: allow large ones.
message.max.bytes=16777216
replica.fetch.max.bytes=16777216
socket.request.max.bytes=104857600

# Small machine: fewer threads than the defaults.
$(thread_config)

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

# The cluster id, made once per data dir: every node of a cluster is formatted with it.
cluster_id() {
    if [[ ! -s "$CLUSTER_ID_FILE" ]]; then
        local cid
        cid="$("$JAVA" -XX:TieredStopAtLevel=1 -cp "$LIBS/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n1)"
        [[ -n "$cid" ]] || die "could not generate a cluster id"
        echo "$cid" >"$CLUSTER_ID_FILE"
    fi
    cat "$CLUSTER_ID_FILE"
}

format_storage() {
    if [[ -f "$LOG_DIRS/meta.properties" ]]; then
        return 0   # already formatted; keep data
    fi
    local cid
    cid="$(cluster_id)"
    log "formatting $LOG_DIRS (cluster id $cid)"
    local scram=() users=() user
    if [[ "$SECURITY" == SASL_SSL ]]; then
        IFS=, read -ra users <<<"$SCRAM_USERS"
        for user in "${users[@]}"; do
            scram+=(--add-scram "SCRAM-SHA-512=[name=${user%%:*},password=${user#*:}]")
        done
    fi
    "$JAVA" -XX:TieredStopAtLevel=1 -Dlog4j2.configurationFile="$LOG4J_CONF" -cp "$LIBS/*" \
        kafka.tools.StorageTool format -t "$cid" -c "$CONF" --ignore-formatted "${scram[@]}" >&2 \
        || die "kafka-storage format failed"
}

# A cluster's data dir records its shape at the first start (see the top of this file).
record_layout() {
    ((BROKERS > 1)) || return 0
    [[ -s "$LAYOUT_FILE" ]] && return 0
    printf 'brokers=%s\nbase_port=%s\n' "$BROKERS" "$BASE_PORT" >"$LAYOUT_FILE"
}

# --------------------------------------------------------------------- start
# Start the selected node's JVM (not running, ports free); prints its pid.
launch() {
    if port_open "$PORT" || port_open "$CONTROLLER_PORT"; then
        die "port $PORT or $CONTROLLER_PORT on 127.0.0.1 is already in use by another process"
    fi
    write_config
    format_storage

    SERVER_LOG_OFFSET="$(stat -c %s "$LOG_DIR/server.log" 2>/dev/null || echo 0)"
    if ((BROKERS == 1)); then
        log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$PORT (data: $DATA_DIR)"
    else
        log "starting Kafka $KAFKA_VERSION node $NODE_ID/$BROKERS on 127.0.0.1:$PORT (data: $NODE_DIR)"
    fi
    local pid
    # shellcheck disable=SC2086
    nohup setsid "$JAVA" \
        $HEAP_OPTS \
        -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
        -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError $JIT_OPTS \
        -Djava.awt.headless=true \
        -Dkafka.logs.dir="$LOG_DIR" \
        -Dlog4j2.configurationFile="$LOG4J_CONF" \
        -cp "$LIBS/*" \
        kafka.Kafka "$CONF" \
        >"$OUT_FILE" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$PID_FILE"
    LAUNCHED_PID="$pid"
}

start() {
    fetch
    ensure_probe
    lock_data_dir

    local pid
    if pid="$(broker_pid)"; then
        log "already running (pid $pid) on 127.0.0.1:$PORT"
        wait_ready "$pid"
        return 0
    fi
    rm -f "$PID_FILE"
    launch
    wait_ready "$LAUNCHED_PID"
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

# Start every node of the cluster that is not running, then wait until each answers and sees all.
start_cluster() {
    fetch
    ensure_probe
    lock_data_dir
    record_layout

    local i pid pids=() started=0
    for i in $(all_nodes); do  # every port free before any node starts
        select_node "$i"
        if ! broker_pid >/dev/null && { port_open "$PORT" || port_open "$CONTROLLER_PORT"; }; then
            die "port $PORT or $CONTROLLER_PORT on 127.0.0.1 (node $i) is already in use by another process"
        fi
    done
    for i in $(all_nodes); do
        select_node "$i"
        if pid="$(broker_pid)"; then
            log "node $i already running (pid $pid) on 127.0.0.1:$PORT"
        else
            rm -f "$PID_FILE"
            launch
            pid="$LAUNCHED_PID"
            started=1
        fi
        pids+=("$pid")
    done
    local t0=$SECONDS
    if ! "$JAVA" -Xmx64m -XX:TieredStopAtLevel=1 -cp "$LIBS/*:$PROBE_DIR" \
            KafkaReady "$(bootstrap_servers)" "$START_TIMEOUT" "$(IFS=,; echo "${pids[*]}")" "$CLIENT_CONF" \
            "$(all_nodes | paste -sd,)" >&2; then
        log "cluster not ready after $((SECONDS - t0))s"
        for i in $(all_nodes); do
            select_node "$i"
            log "node $i:"
            log_tail
        done
        if ((started)); then
            log "stopping the cluster"
            stop_cluster || true
        fi
        exit 1
    fi
    log "cluster of $BROKERS ready: $(bootstrap_servers) (pids ${pids[*]})"
}

# Start node $1 again on its storage (after kill-node) and wait until it answers and is live.
start_node() {
    fetch
    ensure_probe
    lock_data_dir
    select_node "$1"
    local pid
    if pid="$(broker_pid)"; then
        log "node $NODE_ID already running (pid $pid)"
        return 0
    fi
    [[ -f "$LOG_DIRS/meta.properties" ]] || die "node $NODE_ID was never started: start the cluster first"
    rm -f "$PID_FILE"
    launch
    pid="$LAUNCHED_PID"
    # It must see itself and every other running node live (it is unfenced once it caught up).
    local i live=()
    for i in $(all_nodes); do
        select_node "$i"
        broker_pid >/dev/null && live+=("$i")
    done
    select_node "$1"
    local t0=$SECONDS
    "$JAVA" -Xmx64m -XX:TieredStopAtLevel=1 -cp "$LIBS/*:$PROBE_DIR" \
        KafkaReady "127.0.0.1:$PORT" "$START_TIMEOUT" "$pid" "$CLIENT_CONF" "$(IFS=,; echo "${live[*]}")" >&2 || {
        log "node $NODE_ID not ready after $((SECONDS - t0))s"
        log_tail
        exit 1
    }
    log "node $NODE_ID ready on 127.0.0.1:$PORT (pid $pid)"
}

# kill -9 node $1's JVM (a crash, for chaos tests): no clean shutdown, the storage stays.
kill_node() {
    select_node "$1"
    local pid
    pid="$(broker_pid)" || die "node $NODE_ID is not running"
    log "killing node $NODE_ID (pid $pid, SIGKILL)"
    kill -KILL "$pid" 2>/dev/null || true
    pid_wait_exit "$pid" 100 0.1 || die "node $NODE_ID (pid $pid) still alive after SIGKILL"
    rm -f "$PID_FILE"
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
    if ! pid_wait_exit "$pid" 60 0.5; then  # up to 30 s for a clean shutdown
        log "still alive after 30s; SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$PID_FILE"
    log "stopped"
}

# Every node at once (SIGTERM while the quorum still stands), then SIGKILL what is left after 30 s.
stop_cluster() {
    local i pid pids=()
    for i in $(all_nodes); do
        select_node "$i"
        if pid="$(broker_pid)"; then
            log "stopping node $i (pid $pid, SIGTERM)"
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
        rm -f "$PID_FILE"
    done
    if ((${#pids[@]} == 0)); then
        log "not running"
        return 0
    fi
    local alive
    for ((i = 0; i < 60; i++)); do
        alive=()
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        ((${#alive[@]})) || break
        sleep 0.5
    done
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid still alive after 30s; SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    log "stopped"
}

status() {
    local pid
    if ((BROKERS == 1)); then
        if pid="$(broker_pid)"; then
            echo "running (pid $pid, 127.0.0.1:$PORT, Kafka $KAFKA_VERSION, data $DATA_DIR)"
            return 0
        fi
        echo "not running"
        return 3
    fi
    local i up=0
    for i in $(all_nodes); do
        select_node "$i"
        if pid="$(broker_pid)"; then
            echo "node $i: running (pid $pid, 127.0.0.1:$PORT, data $NODE_DIR)"
            up=$((up + 1))
        else
            echo "node $i: not running (127.0.0.1:$PORT)"
        fi
    done
    echo "$up of $BROKERS brokers running (Kafka $KAFKA_VERSION, bootstrap $(bootstrap_servers))"
    ((up == BROKERS)) || return 3
}

logs() {
    local lines="${1:-100}" i
    if ((BROKERS == 1)); then
        tail -n "$lines" "$LOG_DIR/server.log"
        return
    fi
    for i in $(all_nodes); do
        select_node "$i"
        echo "===== node $i: $LOG_DIR/server.log ====="
        tail -n "$lines" "$LOG_DIR/server.log" 2>/dev/null || true
    done
}

node_arg() {
    ((BROKERS > 1)) || die "$1 needs a cluster: --brokers N (N > 1), or MEMSTREAM_KAFKA_DATA of one"
    [[ "${2:-}" =~ ^[0-9]+$ ]] || usage
}

case "${1:-}" in
    fetch) fetch ;;
    start)
        if ((BROKERS == 1)); then start; else start_cluster; fi
        ;;
    stop)
        lock_data_dir
        if ((BROKERS == 1)); then stop; else stop_cluster; fi
        ;;
    restart) "$SCRIPT_DIR/kafka.sh" --brokers "$BROKERS" stop && "$SCRIPT_DIR/kafka.sh" --brokers "$BROKERS" start ;;
    status) status ;;
    logs) logs "${2:-100}" ;;
    bootstrap) bootstrap_servers ;;
    configs)
        # kafka-configs against this broker (or cluster): e.g. client quotas per principal,
        #   kafka.sh configs --alter --add-config producer_byte_rate=1048576 --entity-type users --entity-name acme
        fetch >&2
        shift
        "$JAVA" -cp "$LIBS/*" -Dlog4j2.level=warn org.apache.kafka.tools.ConfigCommand \
            --bootstrap-server "$(bootstrap_servers)" "$@"
        ;;
    kill-node) node_arg "$@"; kill_node "$2" ;;
    start-node) node_arg "$@"; start_node "$2" ;;
    node-pid)
        node_arg "$@"
        select_node "$2"
        broker_pid || { log "node $2 is not running"; exit 3; }
        ;;
    *) usage ;;
esac
