//! The parallel fan-out benchmark's workflows and how its figures are read, shared by
//! `trellis-bench --mode fan-out` (embedded host) and `trellis-bench-aws --fan-out N`
//! (emulated serverless stack): a `vendor.trellis.forEach` over N items and a `core.dispatch`
//! with `fanOutPolicy: parallel` dispatching N workers, each child a one-node workflow, at
//! most [`WIDTH`] children at once.
//!
//! Peak concurrency is read two ways: from the parent's log (the running count after each
//! per-child event: `trellis.loop.itemStarted` +1, `trellis.loop.itemFinished` −1; a
//! dispatch's log has no per-child end event, so it has no such figure) and from the child
//! runs' own `startedAt`/`endedAt` (the most runs alive at one instant, millisecond
//! timestamps, an end counted before a start at the same millisecond).

use serde_json::{json, Value};

/// Items of the loop and workers of the dispatch (the embedded host's workflows).
pub(crate) const ITEMS: usize = 1000;
/// `maxConcurrency` of both.
pub(crate) const WIDTH: usize = 50;
/// The delay child's `core.delay`, in milliseconds.
pub(crate) const CHILD_DELAY_MS: u64 = 20;

/// The one-node `core.noop` child.
pub(crate) const NOOP_CHILD: &str = "fan-noop";
/// The one-node `core.delay` child.
pub(crate) const DELAY_CHILD: &str = "fan-delay";
/// The loop over [`NOOP_CHILD`].
pub(crate) const LOOP_NOOP: &str = "bench-for-each-noop";
/// The loop over [`DELAY_CHILD`].
pub(crate) const LOOP_DELAY: &str = "bench-for-each-delay";
/// The parallel dispatch of [`NOOP_CHILD`] workers.
pub(crate) const DISPATCH_PARALLEL: &str = "bench-dispatch-parallel";

/// One measured shape: a workflow and what its children are.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Case {
    /// How the report names it.
    pub(crate) name: &'static str,
    /// The parent workflow's id.
    pub(crate) workflow: &'static str,
    /// The node that fans out.
    pub(crate) node: &'static str,
    /// What each child runs, for the report.
    pub(crate) child: &'static str,
}

/// The loop over noop children, the loop over 20 ms delays, the parallel dispatch.
pub(crate) const CASES: [Case; 3] = [
    Case { name: "forEach-noop", workflow: LOOP_NOOP, node: "loop", child: "core.noop" },
    Case { name: "forEach-delay-20ms", workflow: LOOP_DELAY, node: "loop", child: "core.delay 20 ms" },
    Case { name: "dispatch-parallel-noop", workflow: DISPATCH_PARALLEL, node: "dispatch", child: "core.noop" },
];

/// A one-node child workflow.
pub(crate) fn child(id: &str, delay_ms: Option<u64>) -> Value {
    let node = match delay_ms {
        Some(ms) => json!({"id": "work", "typeId": "core.delay", "config": {"delayMs": ms}}),
        None => json!({"id": "work", "typeId": "core.noop"}),
    };
    json!({"id": id, "name": id, "nodes": [node]})
}

/// `forEach(items) → noop`, each item running `child`, at most `width` at once.
pub(crate) fn for_each(id: &str, child: &str, items: usize, width: usize) -> Value {
    let items: Vec<Value> = (0..items).map(Value::from).collect();
    let config = json!({"items": items, "workflowId": child, "maxConcurrency": width});
    json!({"id": id, "name": id,
        "nodes": [{"id": "loop", "typeId": "vendor.trellis.forEach", "config": config},
                  {"id": "after", "typeId": "core.noop"}],
        "edges": [{"id": "e", "sourceNodeId": "loop", "targetNodeId": "after"}]})
}

/// A supervisor whose scripted plan names `workers` × `child` once, and a parallel dispatch
/// (wait-all, collect) of at most `width` at once. The plan is honoured for a host's own
/// (global) workflow and a test-scope caller.
pub(crate) fn dispatch_parallel(id: &str, child: &str, workers: usize, width: usize) -> Value {
    let plan = json!([{"kind": "next-worker", "nextWorkerIds": vec![child; workers]}]);
    json!({"id": id, "name": id,
        "nodes": [{"id": "supervisor", "typeId": "core.orchestrator.supervisor", "config": {"mockDispatchPlan": plan}},
                  {"id": "dispatch", "typeId": "core.dispatch",
                   "config": {"fanOutPolicy": "parallel", "maxConcurrency": width}}],
        "edges": [{"id": "e1", "sourceNodeId": "supervisor", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "supervisor"}]})
}

/// Every workflow of the cases, with `items` children each.
pub(crate) fn workflows(items: usize) -> Vec<Value> {
    vec![
        child(NOOP_CHILD, None),
        child(DELAY_CHILD, Some(CHILD_DELAY_MS)),
        for_each(LOOP_NOOP, NOOP_CHILD, items, WIDTH),
        for_each(LOOP_DELAY, DELAY_CHILD, items, WIDTH),
        dispatch_parallel(DISPATCH_PARALLEL, NOOP_CHILD, items, WIDTH),
    ]
}

/// What the parent's log says about its fan-out of `node`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LogFigures {
    /// The child run ids, in the order they started.
    pub(crate) children: Vec<String>,
    /// The most children running after any per-child event (`None`: the log has no
    /// per-child end events, as a dispatch's).
    pub(crate) peak: Option<usize>,
    /// Events in the log.
    pub(crate) events: usize,
}

/// Reads `(type, nodeId, payload)` of a parent's events (every mode, debug included).
pub(crate) fn log_figures<'a>(
    node: &str,
    events: impl IntoIterator<Item = (&'a str, Option<&'a str>, &'a Value)>,
) -> LogFigures {
    let (mut figures, mut running, mut peak, mut ends) = (LogFigures::default(), 0usize, 0usize, false);
    for (event_type, node_id, payload) in events {
        figures.events += 1;
        if node_id != Some(node) {
            continue;
        }
        match event_type {
            "trellis.loop.itemStarted" | "node.dispatched" => {
                if let Some(id) = payload["childRunId"].as_str() {
                    figures.children.push(id.to_owned());
                }
                running += 1;
                peak = peak.max(running);
            }
            "trellis.loop.itemFinished" => {
                ends = true;
                running = running.saturating_sub(1);
            }
            _ => {}
        }
    }
    figures.peak = ends.then_some(peak);
    figures
}

/// The most intervals `[start, end]` (milliseconds) alive at one instant; an end at the
/// same millisecond as a start is counted first.
pub(crate) fn peak_overlap(intervals: &[(u64, u64)]) -> usize {
    let mut edges: Vec<(u64, i8)> =
        intervals.iter().flat_map(|&(start, end)| [(start, 1), (end.max(start), -1)]).collect();
    // At one instant, -1 sorts before +1.
    edges.sort_unstable();
    let (mut alive, mut peak) = (0i64, 0i64);
    for (_, delta) in edges {
        alive += i64::from(delta);
        peak = peak.max(alive);
    }
    peak.max(0) as usize
}

/// Milliseconds since the epoch of `YYYY-MM-DDTHH:MM:SS(.sss)Z`.
pub(crate) fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date = date.split('-').map(|part| part.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let (clock, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut clock = clock.split(':').map(|part| part.parse::<i64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    let millis: i64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = (((days * 24 + hour) * 60 + minute) * 60 + second) * 1000 + millis;
    u64::try_from(ms).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_peak_is_the_running_count_high_water_mark() {
        let started = |k: u32| ("trellis.loop.itemStarted", json!({"childRunId": format!("c{k}")}));
        let finished = || ("trellis.loop.itemFinished", json!({}));
        let log = [started(0), started(1), finished(), started(2), started(3), finished(), finished()];
        let figures = log_figures("loop", log.iter().map(|(t, p)| (*t, Some("loop"), p)));
        assert_eq!(figures.peak, Some(3));
        assert_eq!(figures.children, ["c0", "c1", "c2", "c3"]);
        let other = json!({"childRunId": "x"});
        let dispatch = [("node.dispatched", Some("dispatch"), &other), ("node.dispatched", Some("elsewhere"), &other)];
        let figures = log_figures("dispatch", dispatch);
        assert_eq!((figures.peak, figures.children.len(), figures.events), (None, 1, 2));
    }

    #[test]
    fn overlap_counts_an_end_before_a_start_at_the_same_millisecond() {
        assert_eq!(peak_overlap(&[(0, 10), (10, 20), (20, 30)]), 1);
        assert_eq!(peak_overlap(&[(0, 10), (5, 20), (6, 7), (15, 30)]), 3);
        assert_eq!(peak_overlap(&[]), 0);
    }

    #[test]
    fn timestamps_parse_to_epoch_milliseconds() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("2026-12-02T16:35:58.123Z"), Some(1_796_229_358_123));
        assert_eq!(parse_rfc3339_ms("2000-03-01T00:00:01Z"), Some(951_868_801_000));
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
    }
}
