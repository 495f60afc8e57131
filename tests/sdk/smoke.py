"""Drives a Trellis host through the public Python SDK `openwop-client` (protocol v2) only.

Run by `tests/e2e_sdk.rs` against an embedded host: `python smoke.py BASE_URL API_KEY`.
Prints one PASS line per check and exits non-zero on the first failure.
"""

import sys
import time

import urllib.error

from openwop_client import (
    CancelRunRequest,
    CreateRunRequest,
    ForkRunRequest,
    OpenwopClient,
    PauseRunRequest,
    ResolveInterruptRequest,
    WopError,
)

BASE, KEY = sys.argv[1], sys.argv[2]
client = OpenwopClient(BASE, KEY, timeout=20.0)
UPDATES_EXCLUDED = {"node.started", "node.retried", "variable.changed", "version.pinned", "log.appended"}


def check(name, condition, detail=""):
    if not condition:
        print(f"FAIL {name} {detail}", flush=True)
        sys.exit(1)
    print(f"PASS {name}", flush=True)


def error_of(call):
    try:
        call()
    except WopError as error:
        code = error.envelope.error if error.envelope else None
        return error.status, code
    return None, None


def full_log(run_id):
    events, cursor = [], None
    while True:
        page = client.runs_poll_events(run_id, after_sequence=cursor, timeout_seconds=0)
        events.extend(page.events)
        if not page.events:
            return events, page
        cursor = page.lastSequence


def wait_status(run_id, wanted, within=5.0):
    started = time.time()
    while time.time() - started < within:
        snapshot = client.runs_get(run_id)
        if snapshot.status == wanted:
            return snapshot
        time.sleep(0.05)
    raise AssertionError(f"{run_id} never reached {wanted}")


# Discovery
caps = client.discovery_capabilities()
check("discovery parses", "2.0" in caps.protocolVersions and caps.preferredVersion == "2.0", caps.protocolVersions)
check("discovery capability records", all(r.since and r.witness for r in caps.families.values()) and caps.families)
check("openapi", isinstance(client.discovery_openapi(), dict))

# Create, snapshot, stream
created = client.runs_create(CreateRunRequest(workflowId="conformance-multi-node", inputs={}))
check("create", created.runId.startswith("default/") and "~2F" in created.eventsUrl, created)
snapshot = client.runs_get(created.runId)
check("snapshot", snapshot.owner.tenant == "default" and snapshot.owner.subject.subjectId and snapshot.eventLogSchemaVersion == 3)
streamed = list(client.runs_events(created.runId, timeout_seconds=10))
check("stream ends with the terminal event", streamed and streamed[-1].type == "run.completed", [e.type for e in streamed])
log, last_page = full_log(created.runId)
expected = [e.sequence for e in log if e.type not in UPDATES_EXCLUDED]
check("updates stream = the log filtered by mode", [e.sequence for e in streamed] == expected, (expected, streamed))
debug = list(client.runs_events(created.runId, stream_mode="debug", timeout_seconds=10))
check("debug stream = the whole log", [e.sequence for e in debug] == [e.sequence for e in log])
check("poll reaches terminal", last_page.isTerminal and last_page.status == "completed")
later = client.runs_poll_events(created.runId, after_sequence=2, timeout_seconds=0)
check("poll after a cursor", [e.sequence for e in later.events] == [e.sequence for e in log if e.sequence > 2])
end = client.runs_poll_events(created.runId, after_sequence=log[-1].sequence, timeout_seconds=0)
check("poll at the end", end.events == [] and end.lastSequence == log[-1].sequence)
resumed = list(client.runs_events(created.runId, stream_mode="debug", last_event_id="3", timeout_seconds=10))
check("resume with Last-Event-ID", [e.sequence for e in resumed] == [e.sequence for e in log if e.sequence > 3])

# Idempotency
first = client.runs_create(CreateRunRequest(workflowId="conformance-noop"), idempotency_key="sdk-key-1")
again = client.runs_create(CreateRunRequest(workflowId="conformance-noop"), idempotency_key="sdk-key-1")
check("idempotent create replays", first.runId == again.runId)
status, code = error_of(lambda: client.runs_create(CreateRunRequest(workflowId="conformance-delay"), idempotency_key="sdk-key-1"))
check("idempotency mismatch", (status, code) == (409, "idempotency_key_mismatch"), (status, code))
status, code = error_of(lambda: client.runs_create(CreateRunRequest(workflowId="conformance-noop"), dedup=True))
check("dedup is refused, not ignored", status == 400, (status, code))

# Cancel a long run
long_run = client.runs_create(CreateRunRequest(workflowId="conformance-cancellable", inputs={"delayMs": 60000}))
wait_status(long_run.runId, "running")
cancelled = client.runs_cancel(long_run.runId, CancelRunRequest(reason="sdk smoke"))
check("cancel", cancelled.status in ("cancelling", "cancelled"))
tail = list(client.runs_events(long_run.runId, timeout_seconds=10))
check("stream ends cancelled", tail[-1].type == "run.cancelled", [e.type for e in tail])
status, code = error_of(lambda: client.runs_cancel(long_run.runId))
check("cancel of a finished run", (status, code) == (409, "run_terminal"), (status, code))

# List
listed = client.runs_list(limit=5)
check("list runs", listed is not None and listed.runs and all(r.runId.startswith("default/") for r in listed.runs))

# Pause and resume
paused_run = client.runs_create(CreateRunRequest(workflowId="conformance-delay", inputs={"delayMs": 1500}))
wait_status(paused_run.runId, "running")
paused = client.runs_pause(paused_run.runId, PauseRunRequest(reason="sdk", drainPolicy="immediate"))
check("pause", paused.status == "paused")
resumed_run = client.runs_resume(paused_run.runId)
check("resume", resumed_run.status == "running")
check("paused run completes", list(client.runs_events(paused_run.runId, timeout_seconds=10))[-1].type == "run.completed")

# Approvals by run and by token
gate = client.runs_create(CreateRunRequest(workflowId="conformance-approval"))
wait_status(gate.runId, "waiting-approval")
answer = client.interrupts_resolve_by_run(gate.runId, "gate", ResolveInterruptRequest(resumeValue={"action": "accept"}))
check("approval by run", (answer["status"] if isinstance(answer, dict) else answer.status) in ("running", "completed"), answer)
check("approved run completes", list(client.runs_events(gate.runId, timeout_seconds=10))[-1].type == "run.completed")
gate = client.runs_create(CreateRunRequest(workflowId="conformance-approval"))
waiting = wait_status(gate.runId, "waiting-approval")
token = waiting.interrupt["interruptToken"]
inspected = client.interrupts_inspect_by_token(token)
check("inspect by token", inspected.kind == "approval")
client.interrupts_resolve_by_token(token, ResolveInterruptRequest(resumeValue={"action": "accept"}))
check("approval by token completes", list(client.runs_events(gate.runId, timeout_seconds=10))[-1].type == "run.completed")

# Error paths
bad = OpenwopClient(BASE, "not-a-key", timeout=20.0)
status, code = error_of(lambda: bad.runs_get(created.runId))
check("bad key", (status, code) == (401, "unauthenticated"), (status, code))
status, code = error_of(lambda: bad.runs_get("default/run-missing"))
check("bad key before existence", status == 401, status)
for name, call in [
    ("get", lambda: client.runs_get("default/run-missing")),
    ("poll", lambda: client.runs_poll_events("default/run-missing", timeout_seconds=0)),
    ("cancel", lambda: client.runs_cancel("default/run-missing")),
    ("another tenant", lambda: client.runs_get("other/" + created.runId.split("/", 1)[1])),
]:
    status, code = error_of(call)
    check(f"missing run: {name}", (status, code) == (404, "not_found"), (status, code))
status, code = error_of(lambda: client.runs_create(CreateRunRequest(workflowId="no-such-workflow")))
check("unknown workflow", status is not None and 400 <= status < 500, status)

# Forks and diff (docs/replay.md)
check("replay advertised", "replay" in caps.families and caps.raw["replay"]["modes"] == ["replay", "branch"], caps.raw.get("replay"))
forked = client.runs_fork(created.runId, ForkRunRequest(fromSeq=0, mode="replay"))
check("fork", forked.sourceRunId == created.runId and forked.mode == "replay" and forked.runId.startswith("default/"), forked)
check("fork completes", list(client.runs_events(forked.runId, timeout_seconds=10))[-1].type == "run.completed")
check("a replay re-tells its source", [e.type for e in full_log(forked.runId)[0]] == [e.type for e in log])
diff = client.runs_diff(created.runId, created.runId)
check("diff of a run with itself", diff is not None and diff.divergedAtSeq is None and diff.eventDiffs == [], diff)
branch = client.runs_fork(created.runId, ForkRunRequest(fromSeq=2, mode="branch", runOptionsOverlay={"tags": ["sdk"]}))
check("branch", branch.mode == "branch" and branch.fromSeq == 2, branch)
check("branch completes", list(client.runs_events(branch.runId, timeout_seconds=10))[-1].type == "run.completed")
status, code = error_of(lambda: client.runs_fork(created.runId, ForkRunRequest(fromSeq=99999, mode="replay")))
check("fork past the log", (status, code) == (422, "fork_point_invalid"), (status, code))
status, code = error_of(lambda: client.runs_fork("default/run-missing", ForkRunRequest(fromSeq=0, mode="replay")))
check("fork of a missing run", (status, code) == (404, "not_found"), (status, code))

messages = list(client.runs_events(created.runId, stream_mode="messages", timeout_seconds=5))
check("the messages stream of a run without model calls is empty", messages == [], messages)
try:
    list(client.runs_events(created.runId, stream_mode="tokens", timeout_seconds=5))
    check("an unserved stream mode is refused", False)
except urllib.error.HTTPError as error:
    check("an unserved stream mode is refused", error.code == 400, error.code)
future = OpenwopClient(BASE, KEY, timeout=20.0, major=3)
status, code = error_of(future.discovery_capabilities)
check("another major on discovery", (status, code) == (406, "protocol_version_unsupported"), (status, code))
status, code = error_of(lambda: future.runs_get(created.runId))
check("another major on runs", (status, code) == (406, "protocol_version_unsupported"), (status, code))
print("SDK smoke: all checks passed", flush=True)
