//! Running one queue batch's items concurrently by group: items of different groups run at
//! the same time, one group's items one after another in batch order. The dispatcher groups
//! step messages by run (one run's steps keep their order, and a run's commits never race
//! each other inside one invocation) and completion notices by FIFO message group.
//!
//! All groups run on the invoking task (no spawning), so handlers may borrow the app; the
//! concurrency is I/O concurrency — a slow call of one run (an activity's HTTP request) no
//! longer holds up the other runs of the batch. A batch is small (the event-source mapping's
//! `BatchSize`, at most 10 here), so the number of groups in flight needs no further bound.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;

use futures_util::future::join_all;

/// What a failed item means for the rest of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// The group's next items are still handled (standard queue: each message stands alone).
    Continue,
    /// The group's next items are not handled and count as failed, so they are redelivered
    /// after the failed one and the group's order holds (FIFO queue).
    FailRest,
}

/// Handles `items` grouped by `key` and returns, per item and in `items`' order, whether it
/// failed.
///
/// - Items with the same `Some(key)` form one group, handled one at a time in batch order;
///   an item whose key is `None` is a group of its own.
/// - Different groups are handled concurrently.
/// - `handler` returns `true` when the item failed; with [`AfterFailure::FailRest`] the items
///   after a failed one in its group are not handed to `handler` and are reported failed.
pub async fn run_grouped<'a, T, K, F, Fut>(
    items: &'a [T],
    key: impl Fn(&T) -> Option<K>,
    after_failure: AfterFailure,
    handler: F,
) -> Vec<bool>
where
    K: Eq + Hash,
    F: Fn(&'a T) -> Fut,
    Fut: Future<Output = bool>,
{
    let groups = group_indices(items, key);
    let handler = &handler;
    let runs = groups.into_iter().map(|members| async move {
        let mut outcomes = Vec::with_capacity(members.len());
        let mut blocked = false;
        for index in members {
            let failed = blocked || handler(&items[index]).await;
            blocked |= failed && after_failure == AfterFailure::FailRest;
            outcomes.push((index, failed));
        }
        outcomes
    });
    let mut failed = vec![false; items.len()];
    for (index, outcome) in join_all(runs).await.into_iter().flatten() {
        failed[index] = outcome;
    }
    failed
}

/// The groups of `items` as index lists, each in batch order, groups in order of first item.
fn group_indices<T, K: Eq + Hash>(items: &[T], key: impl Fn(&T) -> Option<K>) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: HashMap<K, usize> = HashMap::new();
    for (index, item) in items.iter().enumerate() {
        match key(item) {
            Some(key) => {
                let group = *group_of.entry(key).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[group].push(index);
            }
            None => groups.push(vec![index]),
        }
    }
    groups
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// One fake item: its group (`None`: ungrouped), name, how long it "works", whether it fails.
    #[derive(Debug, Clone)]
    struct Item {
        group: Option<&'static str>,
        name: &'static str,
        work_ms: u64,
        fails: bool,
    }

    fn item(group: Option<&'static str>, name: &'static str, work_ms: u64, fails: bool) -> Item {
        Item { group, name, work_ms, fails }
    }

    /// What the fake handler saw: start/end marks, and in-flight counts overall and per group.
    #[derive(Default)]
    pub(crate) struct Recorder {
        state: Mutex<RecorderState>,
    }

    #[derive(Default)]
    struct RecorderState {
        marks: Vec<(bool, String)>,
        in_flight: usize,
        max_in_flight: usize,
        in_flight_by_group: HashMap<String, usize>,
        max_in_flight_by_group: HashMap<String, usize>,
    }

    impl Recorder {
        pub(crate) fn start(&self, group: &str, name: &str) {
            let mut state = self.state.lock().unwrap();
            state.marks.push((true, name.to_owned()));
            state.in_flight += 1;
            state.max_in_flight = state.max_in_flight.max(state.in_flight);
            let now = {
                let count = state.in_flight_by_group.entry(group.to_owned()).or_default();
                *count += 1;
                *count
            };
            let max = state.max_in_flight_by_group.entry(group.to_owned()).or_default();
            *max = (*max).max(now);
        }

        pub(crate) fn end(&self, group: &str, name: &str) {
            let mut state = self.state.lock().unwrap();
            state.marks.push((false, name.to_owned()));
            state.in_flight -= 1;
            *state.in_flight_by_group.get_mut(group).expect("started") -= 1;
        }

        /// Names in the order they started.
        pub(crate) fn started(&self) -> Vec<String> {
            self.state.lock().unwrap().marks.iter().filter(|(start, _)| *start).map(|(_, name)| name.clone()).collect()
        }

        pub(crate) fn max_in_flight(&self) -> usize {
            self.state.lock().unwrap().max_in_flight
        }

        pub(crate) fn max_in_flight_of(&self, group: &str) -> usize {
            self.state.lock().unwrap().max_in_flight_by_group.get(group).copied().unwrap_or(0)
        }

        /// Whether `first` ended before `second` started.
        pub(crate) fn ended_before_start(&self, first: &str, second: &str) -> bool {
            let marks = &self.state.lock().unwrap().marks;
            let end = marks.iter().position(|(start, name)| !start && name == first);
            let start = marks.iter().position(|(start, name)| *start && name == second);
            matches!((end, start), (Some(end), Some(start)) if end < start)
        }
    }

    async fn run(items: &[Item], after_failure: AfterFailure, recorder: &Recorder) -> Vec<bool> {
        run_grouped(
            items,
            |item| item.group,
            after_failure,
            |item| async move {
                let group = item.group.unwrap_or(item.name);
                recorder.start(group, item.name);
                tokio::time::sleep(Duration::from_millis(item.work_ms)).await;
                recorder.end(group, item.name);
                item.fails
            },
        )
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn different_groups_overlap_and_one_group_runs_in_order() {
        // Run a's first step is slow: b's steps must not wait for it, and a's later steps
        // must wait for it even though they are quick.
        let items = [
            item(Some("a"), "a1", 50, false),
            item(Some("b"), "b1", 10, false),
            item(Some("a"), "a2", 5, false),
            item(Some("b"), "b2", 10, false),
            item(Some("a"), "a3", 5, false),
        ];
        let recorder = Recorder::default();
        let failed = run(&items, AfterFailure::Continue, &recorder).await;
        assert_eq!(failed, vec![false; 5]);
        assert_eq!(recorder.max_in_flight(), 2, "the two runs are handled at the same time");
        assert!(!recorder.ended_before_start("a1", "b1"), "b1 does not wait for a1");
        assert!(!recorder.ended_before_start("a1", "b2"), "b2 does not wait for a1");
        assert_eq!(recorder.max_in_flight_of("a"), 1, "one run's steps never overlap");
        assert_eq!(recorder.max_in_flight_of("b"), 1);
        assert!(recorder.ended_before_start("a1", "a2") && recorder.ended_before_start("a2", "a3"));
        assert!(recorder.ended_before_start("b1", "b2"));
        let started = recorder.started();
        let of = |prefix: char| started.iter().filter(|name| name.starts_with(prefix)).cloned().collect::<Vec<_>>();
        assert_eq!(of('a'), ["a1", "a2", "a3"], "batch order within a run");
        assert_eq!(of('b'), ["b1", "b2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_land_on_their_own_items_and_ungrouped_items_stand_alone() {
        let items = [
            item(Some("a"), "a1", 10, true),
            item(None, "x", 30, true),
            item(Some("a"), "a2", 10, false),
            item(None, "y", 30, false),
            item(Some("b"), "b1", 10, true),
        ];
        let recorder = Recorder::default();
        let failed = run(&items, AfterFailure::Continue, &recorder).await;
        assert_eq!(failed, [true, true, false, false, true]);
        assert_eq!(recorder.started().len(), 5, "a failure does not stop the rest of its run");
        assert!(recorder.ended_before_start("a1", "a2"));
        assert_eq!(recorder.max_in_flight(), 4, "x, y, run a and run b are four groups at once");
    }

    #[tokio::test(start_paused = true)]
    async fn fifo_fails_the_rest_of_a_group_without_handling_it() {
        let items = [
            item(Some("g1"), "p1", 10, false),
            item(Some("g1"), "p2", 10, true),
            item(Some("g2"), "q1", 40, false),
            item(Some("g1"), "p3", 10, false),
            item(Some("g2"), "q2", 10, false),
            item(Some("g1"), "p4", 10, false),
        ];
        let recorder = Recorder::default();
        let failed = run(&items, AfterFailure::FailRest, &recorder).await;
        assert_eq!(failed, [false, true, false, true, false, true]);
        let started = recorder.started();
        assert!(!started.contains(&"p3".to_owned()) && !started.contains(&"p4".to_owned()), "{started:?}");
        assert!(started.contains(&"q2".to_owned()), "the other group goes on");
        assert_eq!(recorder.max_in_flight(), 2, "the groups run at the same time");
        assert_eq!(recorder.max_in_flight_of("g1"), 1);
        assert!(recorder.ended_before_start("q1", "q2"));
    }

    #[test]
    fn groups_keep_batch_order() {
        let keys = [Some(1), Some(2), None, Some(1), None, Some(2)];
        assert_eq!(group_indices(&keys, |key| *key), [vec![0, 3], vec![1, 5], vec![2], vec![4]]);
    }
}
