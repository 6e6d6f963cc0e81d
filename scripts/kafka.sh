#!/usr/bin/env bash
# Apache Kafka for tests and demos: one KRaft broker (combined broker+controller),
# or a three-broker cluster with NEXUS_KAFKA_BROKERS=3, run as plain processes on
# 127.0.0.1 -- no Docker.
#
# The broker is the official org.apache.kafka:kafka_2.13 artifact from Maven
# Central, resolved once with `mvn` (scripts/kafka/pom.xml) into a cache
# directory and run with the machine's Java (17+).
#
# Usage: scripts/kafka.sh up|down|status|restart
#
#   up       resolve artifacts (first time only), format storage (first time
#            only), make the TLS material (first time only), start the broker,
#            wait until it answers metadata requests, create the topics and the
#            SCRAM user (idempotent). Already running -> says so, exit 0; running
#            without the SASL_SSL listener (started by an older kafka.sh) ->
#            restarted with it (data kept).
#   down     stop it: SIGTERM, then SIGKILL after NEXUS_KAFKA_STOP_TIMEOUT s.
#            Not running -> exit 0.
#   restart  down + up; data is kept.
#   status   exit 0 if running (and prints where), 1 if not.
#
# A cluster (NEXUS_KAFKA_BROKERS=3): brokers on PORT, PORT+2, PORT+4, each one also a
# KRaft controller on its port +1 (a quorum of three voters), SASL_SSL on
# NEXUS_KAFKA_SASL_PORT (default PORT+6), +1, +2 (one CA for the three). Topics get
# replication factor 3 and min.insync.replicas 2 (so do the internal topics): with
# acks=all a write survives the loss of any one broker. `up` starts the brokers that are
# not running (after a broker was killed: only that one) and prints the
# NEXUS_KAFKA_BOOTSTRAP of the three; `down` stops the three; `status` exits 0 only
# if all three run.
#
# Environment (all optional):
#   NEXUS_KAFKA_HOME             cache dir (default: <repo>/.cache/kafka)
#   NEXUS_KAFKA_LIBS             broker jars (default: NEXUS_KAFKA_HOME/libs); a cluster in a
#                                scratch home can share the jars of another home
#   NEXUS_KAFKA_BROKERS          1 (default) or 3 (a cluster, see above)
#   NEXUS_KAFKA_PORT             PLAINTEXT port (default 9092); of the first broker in a cluster
#   NEXUS_KAFKA_CONTROLLER_PORT  KRaft controller port (default PORT+1; one broker only)
#   NEXUS_KAFKA_SASL_PORT        SASL_SSL port (default PORT+2, in a cluster PORT+6 and the
#                                next two): TLS (a CA of its own, made with openssl) and
#                                SASL PLAIN or SCRAM-SHA-512
#   NEXUS_KAFKA_SASL_USERNAME    the SASL user the broker knows (default nexus)
#   NEXUS_KAFKA_SASL_PASSWORD    its password (default: generated once, kept in tls/)
#   NEXUS_KAFKA_TOPICS           topics to create (default "nexus.events nexus.events.dlq")
#   NEXUS_KAFKA_TOPIC_PARTITIONS partitions of those topics (default 4)
#   NEXUS_KAFKA_START_TIMEOUT    seconds `up` waits for the broker (default 60)
#   NEXUS_KAFKA_STOP_TIMEOUT     seconds `down` waits before SIGKILL (default 30)
#   NEXUS_KAFKA_HEAP_OPTS        default "-Xms256m -Xmx512m"
#   NEXUS_KAFKA_JVM_OPTS         default "-XX:+UseSerialGC"
#   NEXUS_KAFKA_PYTHON           python with aiokafka used for the readiness check and
#                                topic creation (default <repo>/.venv/bin/python if it
#                                imports aiokafka; otherwise Kafka's own TopicCommand)
#   JAVA_HOME                    picks $JAVA_HOME/bin/java instead of `java` on PATH
#
# Layout of the cache dir:
#   libs/                 broker jars (+ .resolved stamp = sha256 of pom.xml)
#   node-<PORT>/          one per broker port: server.properties, log4j2*.properties,
#                         kafka.pid, kafka.log, data/ (log.dirs); the first broker's
#                         also cluster.id, .lock and tls/ (ca.pem the clients trust,
#                         broker and client certificates, the SASL password, and
#                         client.env: the NEXUS_KAFKA_* settings of a client of the
#                         SASL_SSL listener), shared by the brokers of a cluster
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
POM="$REPO_ROOT/scripts/kafka/pom.xml"

KAFKA_HOME=${NEXUS_KAFKA_HOME:-$REPO_ROOT/.cache/kafka}
HOST=127.0.0.1
BROKERS=${NEXUS_KAFKA_BROKERS:-1}
PORT=${NEXUS_KAFKA_PORT:-9092}
SASL_USER=${NEXUS_KAFKA_SASL_USERNAME:-nexus}
TOPICS=${NEXUS_KAFKA_TOPICS:-nexus.events nexus.events.dlq}
TOPIC_PARTITIONS=${NEXUS_KAFKA_TOPIC_PARTITIONS:-4}
START_TIMEOUT=${NEXUS_KAFKA_START_TIMEOUT:-60}
STOP_TIMEOUT=${NEXUS_KAFKA_STOP_TIMEOUT:-30}
HEAP_OPTS=${NEXUS_KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}
JVM_OPTS=${NEXUS_KAFKA_JVM_OPTS:--XX:+UseSerialGC}
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java

case $BROKERS in
    1) REPLICAS=1 MIN_ISR=1 ;;
    3) REPLICAS=3 MIN_ISR=2 ;;
    *) echo "kafka.sh: error: NEXUS_KAFKA_BROKERS must be 1 or 3, not $BROKERS" >&2; exit 2 ;;
esac

LIBS=${NEXUS_KAFKA_LIBS:-$KAFKA_HOME/libs}
FIRST_DIR="$KAFKA_HOME/node-$PORT"
TLS_DIR="$FIRST_DIR/tls"
CLUSTER_ID_FILE="$FIRST_DIR/cluster.id"
# Every broker's PLAINTEXT and SASL_SSL address, and the controller quorum.
BOOTSTRAP_ALL= SASL_ALL= VOTERS=
for ((n = 0; n < BROKERS; n++)); do
    BOOTSTRAP_ALL+=${BOOTSTRAP_ALL:+,}$HOST:$((PORT + 2 * n))
    VOTERS+=${VOTERS:+,}$((n + 1))@$HOST:$((PORT + 2 * n + 1))
    if ((BROKERS == 1)); then
        SASL_ALL=$HOST:${NEXUS_KAFKA_SASL_PORT:-$((PORT + 2))}
    else
        SASL_ALL+=${SASL_ALL:+,}$HOST:$((${NEXUS_KAFKA_SASL_PORT:-$((PORT + 6))} + n))
    fi
done

# select_node N: the ports and files of broker N (0-based) in the globals the helpers below read.
select_node() {
    NODE=$1
    NODE_PORT=$((PORT + 2 * NODE))
    if ((BROKERS == 1)); then
        CONTROLLER_PORT=${NEXUS_KAFKA_CONTROLLER_PORT:-$((PORT + 1))}
        VOTERS=1@$HOST:$CONTROLLER_PORT
    else
        CONTROLLER_PORT=$((NODE_PORT + 1))
    fi
    SASL_PORT=$(cut -d, -f$((NODE + 1)) <<<"$SASL_ALL")
    SASL_PORT=${SASL_PORT##*:}
    NODE_DIR="$KAFKA_HOME/node-$NODE_PORT"
    DATA_DIR="$NODE_DIR/data"
    PROPS="$NODE_DIR/server.properties"
    LOG4J_BROKER="$NODE_DIR/log4j2.properties"
    LOG4J_TOOLS="$NODE_DIR/log4j2-tools.properties"
    PID_FILE="$NODE_DIR/kafka.pid"
    LOG_FILE="$NODE_DIR/kafka.log"
    BOOTSTRAP="$HOST:$NODE_PORT"
}
select_node 0

say() { echo "kafka.sh: $*"; }
die() { echo "kafka.sh: error: $*" >&2; exit 1; }

# --------------------------------------------------------------------------
# helpers

# Serialise up/down/restart on one node or cluster (several shells may call this at once).
# The lock fd (9) must not leak into the broker JVM: see start_broker.
lock_node() {
    mkdir -p "$FIRST_DIR"
    exec 9>"$FIRST_DIR/.lock"
    flock -w 300 9 || die "timed out waiting for the lock on $FIRST_DIR"
}

broker_pid() {
    # Prints the pid of *our* broker for this port, or nothing. Guards against
    # stale pid files and pid reuse by checking the command line.
    [[ -f $PID_FILE ]] || return 0
    local pid
    pid=$(cat "$PID_FILE" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "kafka.Kafka $PROPS"; then
        echo "$pid"
    fi
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

check_java() {
    command -v "$JAVA" >/dev/null 2>&1 || die "java not found (install a JDK 17+ or set JAVA_HOME)"
    local v
    v=$("$JAVA" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
    [[ ${v%%.*} -ge 17 ]] 2>/dev/null || die "Kafka 4 needs Java 17+, $JAVA is ${v:-unknown}"
}

resolve_libs() {
    local stamp
    stamp=$(sha256sum "$POM" | cut -d' ' -f1)
    [[ -f $LIBS/.resolved && $(cat "$LIBS/.resolved") == "$stamp" ]] && return 0
    mkdir -p "$KAFKA_HOME"
    (
        exec 8>"$KAFKA_HOME/.resolve.lock"
        flock -w 600 8 || die "timed out waiting for $KAFKA_HOME/.resolve.lock"
        [[ -f $LIBS/.resolved && $(cat "$LIBS/.resolved") == "$stamp" ]] && exit 0
        command -v mvn >/dev/null 2>&1 || die "mvn not found (apt-get install maven)"
        say "resolving Kafka broker artifacts with mvn into $LIBS (first run only)..."
        local tmp="$KAFKA_HOME/libs.tmp.$$"
        rm -rf "$tmp"
        mvn -q -B -f "$POM" dependency:copy-dependencies \
            -DoutputDirectory="$tmp" -DincludeScope=runtime >"$KAFKA_HOME/mvn.log" 2>&1 8>&- 9>&- \
            || { cat "$KAFKA_HOME/mvn.log" >&2; rm -rf "$tmp"; die "mvn could not resolve the Kafka artifacts"; }
        ls "$tmp"/kafka_2.13-*.jar >/dev/null 2>&1 || { rm -rf "$tmp"; die "kafka_2.13 jar missing after mvn"; }
        echo "$stamp" >"$tmp/.resolved"
        rm -rf "$LIBS"
        mkdir -p "$(dirname "$LIBS")"
        mv "$tmp" "$LIBS"
    )
}

kafka_version() {
    local jar
    jar=$(ls "$LIBS"/kafka_2.13-*.jar 2>/dev/null | head -n1)
    jar=${jar##*/kafka_2.13-}
    echo "${jar%.jar}"
}

# The TLS material of the SASL_SSL listener, made once with openssl: a CA of its own, the broker's
# certificate (for 127.0.0.1 and localhost) and a client certificate (for clients that present one), all
# PEM (the broker reads PEM key stores). The SASL password: NEXUS_KAFKA_SASL_PASSWORD, or one made once.
make_tls() {
    mkdir -p "$TLS_DIR"
    chmod 700 "$TLS_DIR"
    local t=$TLS_DIR name
    if [[ ! -s $t/ca.pem ]]; then
        command -v openssl >/dev/null 2>&1 || die "openssl not found (apt-get install openssl)"
        say "making a CA and certificates in $t (first run only)"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=nexus-kafka-ca" \
            -keyout "$t/ca.key" -out "$t/ca.pem.tmp" 2>/dev/null || die "openssl could not make the CA"
        for name in broker client; do
            openssl req -newkey rsa:2048 -nodes -subj "/CN=nexus-kafka-$name" \
                -keyout "$t/$name.key" -out "$t/$name.csr" 2>/dev/null || die "openssl: the $name key"
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$t/$name.ext"
            openssl x509 -req -in "$t/$name.csr" -CA "$t/ca.pem.tmp" -CAkey "$t/ca.key" -CAcreateserial \
                -days 3650 -extfile "$t/$name.ext" -out "$t/$name.pem" 2>/dev/null || die "openssl: the $name cert"
            rm -f "$t/$name.csr" "$t/$name.ext"
        done
        cat "$t/broker.key" "$t/broker.pem" >"$t/broker-keystore.pem"
        mv "$t/ca.pem.tmp" "$t/ca.pem"  # last: its presence means the rest is there
    fi
    if [[ -n ${NEXUS_KAFKA_SASL_PASSWORD:-} ]]; then
        printf '%s' "$NEXUS_KAFKA_SASL_PASSWORD" >"$t/password"
    elif [[ ! -s $t/password ]]; then
        openssl rand -hex 16 | tr -d '\n' >"$t/password"
    fi
    chmod 600 "$t"/*.key "$t/broker-keystore.pem" "$t/password"
    {
        echo "# A client of the SASL_SSL listener (scripts/kafka.sh); PLAIN works too."
        echo "NEXUS_KAFKA_BOOTSTRAP=$SASL_ALL"
        echo "NEXUS_KAFKA_SECURITY_PROTOCOL=SASL_SSL"
        echo "NEXUS_KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
        echo "NEXUS_KAFKA_SASL_USERNAME=$SASL_USER"
        echo "NEXUS_KAFKA_SASL_PASSWORD=$(cat "$t/password")"
        echo "NEXUS_KAFKA_SSL_CAFILE=$t/ca.pem"
    } >"$t/client.env"
    chmod 600 "$t/client.env"
}

# A JAAS string value: double-quoted, its backslashes and double quotes escaped.
jaas_quote() {
    local v=${1//\\/\\\\}
    printf '"%s"' "${v//\"/\\\"}"
}

write_config() {
    mkdir -p "$DATA_DIR"
    make_tls
    [[ $SASL_USER =~ ^[A-Za-z0-9._-]+$ ]] || die "NEXUS_KAFKA_SASL_USERNAME may hold only letters, digits, '.', '_', '-'"
    local password
    password=$(jaas_quote "$(cat "$TLS_DIR/password")")
    cat >"$PROPS" <<EOF
# Generated by scripts/kafka.sh -- edits are overwritten on every 'up'.
process.roles=broker,controller
node.id=$((NODE + 1))
controller.quorum.voters=$VOTERS
listeners=PLAINTEXT://$HOST:$NODE_PORT,CONTROLLER://$HOST:$CONTROLLER_PORT,SASL_SSL://$HOST:$SASL_PORT
advertised.listeners=PLAINTEXT://$HOST:$NODE_PORT,SASL_SSL://$HOST:$SASL_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$DATA_DIR

# SASL_SSL: TLS with the CA of tls/ (a client certificate is checked when one is presented), then SASL
# PLAIN (the user below) or SCRAM-SHA-512 (the user set with ConfigCommand once the broker is up).
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER=$password;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
ssl.client.auth=requested

# every topic (the internal ones too) on every broker; an acks=all write needs $MIN_ISR of them
offsets.topic.replication.factor=$REPLICAS
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=$REPLICAS
transaction.state.log.min.isr=$MIN_ISR
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=$REPLICAS
share.coordinator.state.topic.min.isr=$MIN_ISR
default.replication.factor=$REPLICAS
min.insync.replicas=$MIN_ISR

num.partitions=4
auto.create.topics.enable=true
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=168
EOF

    cat >"$LOG4J_BROKER" <<'EOF'
# Broker logging (stdout is redirected to kafka.log by scripts/kafka.sh).
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = WARN
EOF

    cat >"$LOG4J_TOOLS" <<'EOF'
# Kafka CLI tools used by scripts/kafka.sh: warnings only, to stderr.
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
EOF
}

run_tool() {
    # run_tool <main class> args...  (a short-lived JVM on the broker classpath)
    "$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dlog4j2.configurationFile="$LOG4J_TOOLS" -cp "$LIBS/*" "$@" 9>&-
}

format_storage() {
    [[ -f $DATA_DIR/meta.properties ]] && return 0
    local cid
    if [[ -s $CLUSTER_ID_FILE ]]; then
        cid=$(cat "$CLUSTER_ID_FILE")
    else
        # A Kafka cluster id is 16 random bytes, base64url without padding. One starting with '-'
        # would be read by the storage tool as a flag (1 time in 64): draw again.
        cid=-
        while [[ $cid == -* ]]; do
            cid=$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
        done
        echo "$cid" >"$CLUSTER_ID_FILE"
    fi
    say "formatting KRaft storage in $DATA_DIR (cluster id $cid)"
    # Static quorum (controller.quorum.voters) -> plain `format` with no
    # --standalone / --initial-controllers flag; works on Kafka 3.7 .. 4.x.
    run_tool kafka.tools.StorageTool format --ignore-formatted \
        -t "$cid" -c "$PROPS" >>"$LOG_FILE" 2>&1 \
        || { tail -n 30 "$LOG_FILE" >&2; die "storage format failed (see $LOG_FILE)"; }
}

start_broker() {
    : >>"$LOG_FILE"
    echo "=== $(date -u +%FT%TZ) kafka.sh starting broker on $BOOTSTRAP" >>"$LOG_FILE"
    # setsid: own session, so the broker outlives the calling shell/job.
    # 9>&-: do not hand the node lock to the JVM.
    # shellcheck disable=SC2086
    setsid "$JAVA" $HEAP_OPTS $JVM_OPTS \
        -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$LOG4J_BROKER" \
        -Dkafka.logs.dir="$NODE_DIR" \
        -cp "$LIBS/*" kafka.Kafka "$PROPS" \
        </dev/null >>"$LOG_FILE" 2>&1 9>&- &
    echo $! >"$PID_FILE"
}

python_for_admin() {
    local py=${NEXUS_KAFKA_PYTHON:-$REPO_ROOT/.venv/bin/python}
    if [[ -x $py ]] && "$py" -c 'import aiokafka' 2>/dev/null; then echo "$py"; fi
}

# Readiness check + idempotent topic creation with aiokafka. Exit 0 only when
# the broker answered metadata and every topic exists with a leader on every
# partition.
ensure_topics_python() {
    "$1" - "$BOOTSTRAP_ALL" "$TOPIC_PARTITIONS" "$REPLICAS" $TOPICS <<'PY'
import asyncio, sys
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

bootstrap, partitions, replicas, topics = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]

async def main() -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if missing:
            resp = (await admin.create_topics(
                [NewTopic(t, partitions, replicas) for t in missing], timeout_ms=10000)).to_object()
            for err in resp.get("topic_errors", []):
                code = err.get("error_code", 0)
                if code not in (0, 36):  # 36 = TOPIC_ALREADY_EXISTS
                    print(f"create {err.get('topic')}: error {code} {err.get('error_message')}",
                          file=sys.stderr)
                    return 1
        for _ in range(50):
            desc = await admin.describe_topics(topics)
            ok = len(desc) == len(topics) and all(
                t.get("error_code", 0) == 0 and t["partitions"]
                and all(p["leader"] >= 0 and len(p["isr"]) >= min(replicas, 2) for p in t["partitions"])
                for t in desc)
            if ok:
                return 0
            await asyncio.sleep(0.2)
        print("topics have no leaders yet", file=sys.stderr)
        return 1
    finally:
        await admin.close()

sys.exit(asyncio.run(main()))
PY
}

ensure_topics_java() {
    local t
    for t in $TOPICS; do
        run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP_ALL" \
            --create --if-not-exists --topic "$t" \
            --partitions "$TOPIC_PARTITIONS" --replication-factor "$REPLICAS" >/dev/null || return 1
    done
    # Also proves the broker answers metadata requests.
    local listed
    listed=$(run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP_ALL" --list) || return 1
    for t in $TOPICS; do grep -qxF "$t" <<<"$listed" || return 1; done
}

# The SCRAM-SHA-512 user of the SASL_SSL listener (kept in the cluster metadata; set again on every up).
ensure_scram_user() {
    run_tool org.apache.kafka.tools.ConfigCommand --bootstrap-server "$BOOTSTRAP_ALL" --alter \
        --add-config "SCRAM-SHA-512=[password=$(cat "$TLS_DIR/password")]" \
        --entity-type users --entity-name "$SASL_USER" >/dev/null \
        || die "could not set the SCRAM-SHA-512 user $SASL_USER"
}

has_sasl_listener() { grep -qF "SASL_SSL://$HOST:$SASL_PORT" "$PROPS" 2>/dev/null && [[ -s $TLS_DIR/ca.pem ]]; }

# Whether every broker started by this `up` still runs (select_node is left on the last one).
brokers_alive() {
    local n
    for n in "$@"; do
        select_node "$n"
        [[ -n $(broker_pid) ]] || { tail -n 40 "$LOG_FILE" >&2; die "broker $BOOTSTRAP exited during start-up (see $LOG_FILE)"; }
    done
}

# wait_ready N...: the brokers N (just started) open their ports, then the topics have leaders (a cluster
# answers only once two of its three controllers run, so the brokers are started first, then waited for).
wait_ready() {
    local deadline=$((SECONDS + START_TIMEOUT)) py err n
    py=$(python_for_admin)
    for n in "$@"; do
        select_node "$n"
        while ! port_open "$NODE_PORT"; do
            brokers_alive "$@"
            select_node "$n"
            ((SECONDS < deadline)) || die "broker did not open $BOOTSTRAP within ${START_TIMEOUT}s (see $LOG_FILE)"
            sleep 0.3
        done
    done
    err="$FIRST_DIR/.admin.err"
    while :; do
        if [[ -n $py ]]; then
            ensure_topics_python "$py" 2>"$err" && return 0
        else
            ensure_topics_java 2>"$err" && return 0
        fi
        brokers_alive "$@"
        if ((SECONDS >= deadline)); then
            tail -n 20 "$err" >&2
            die "Kafka on $BOOTSTRAP_ALL not ready within ${START_TIMEOUT}s (see $LOG_FILE)"
        fi
        sleep 0.5
    done
}

# --------------------------------------------------------------------------
# commands

cmd_status() {
    local pid n down=0
    for ((n = 0; n < BROKERS; n++)); do
        select_node "$n"
        pid=$(broker_pid)
        if [[ -n $pid ]]; then
            say "running: Kafka $(kafka_version) on $BOOTSTRAP (pid $pid, controller $HOST:$CONTROLLER_PORT, SASL_SSL $HOST:$SASL_PORT, dir $NODE_DIR)"
        else
            say "not running on $BOOTSTRAP"
            down=1
        fi
    done
    return $down
}

# up_node N: start broker N unless it runs (adding N to STARTED); a broker started by an older kafka.sh
# without the SASL_SSL listener is restarted with it (data kept).
up_node() {
    local pid
    select_node "$1"
    pid=$(broker_pid)
    if [[ -n $pid ]] && ! has_sasl_listener; then
        say "running without the SASL_SSL listener: restarting it with one (data kept)"
        down_node "$1"
        pid=
    fi
    if [[ -n $pid ]]; then
        say "already running: Kafka $(kafka_version) on $BOOTSTRAP (pid $pid)"
        return 0
    fi
    if port_open "$NODE_PORT" || port_open "$CONTROLLER_PORT" || port_open "$SASL_PORT"; then
        die "port $NODE_PORT, $CONTROLLER_PORT or $SASL_PORT on $HOST is taken by another process (set NEXUS_KAFKA_PORT)"
    fi
    if ((${#STARTED[@]} == 0)); then
        check_java
        resolve_libs
    fi
    write_config
    format_storage
    start_broker
    STARTED+=("$1")
}

do_up() {
    local t0=$SECONDS n pids=()
    STARTED=()
    for ((n = 0; n < BROKERS; n++)); do up_node "$n"; done
    ((${#STARTED[@]})) || return 0
    wait_ready "${STARTED[@]}"
    ensure_scram_user
    for n in "${STARTED[@]}"; do select_node "$n"; pids+=("$(cat "$PID_FILE")"); done
    say "Kafka $(kafka_version) (KRaft) up on $BOOTSTRAP_ALL (pid ${pids[*]}, topics: $TOPICS; $((SECONDS - t0))s; log $LOG_FILE)"
    say "SASL_SSL (PLAIN, SCRAM-SHA-512) on $SASL_ALL, user $SASL_USER: client settings in $TLS_DIR/client.env"
    ((BROKERS == 1)) || echo "NEXUS_KAFKA_BOOTSTRAP=$BOOTSTRAP_ALL"
}

down_node() {
    local pid i
    select_node "$1"
    pid=$(broker_pid)
    if [[ -z $pid ]]; then
        rm -f "$PID_FILE"
        say "not running on $BOOTSTRAP"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT * 5; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "broker (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$PID_FILE"
    say "stopped broker on $BOOTSTRAP (pid $pid)"
}

# All brokers of a cluster at once: one stopped alone would wait for a quorum the others no longer make.
do_down() {
    local n
    for ((n = 0; n < BROKERS; n++)); do down_node "$n" & done
    wait
}

case ${1:-} in
    up) lock_node; do_up ;;
    down) lock_node; do_down ;;
    restart) lock_node; do_down; do_up ;;
    status) cmd_status ;;
    *)
        echo "usage: $0 up|down|status|restart" >&2
        exit 2
        ;;
esac
