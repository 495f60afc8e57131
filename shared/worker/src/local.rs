//! The embedded worker loop and the in-process adapters it needs: the system clock and a
//! notifier that wakes the loop on every commit and each run's event waiters on its commits.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinSet;
use tracing::{error, warn};
use trellis_core::engine::{Effect, Input};
use trellis_core::ports::{Clock, LocalQueue, Notifier, Task};
use trellis_core::service::Services;
use trellis_core::timefmt::Millis;
use trellis_core::ServiceError;

use crate::crash::CrashPoint;
use crate::step::{process_task, TaskContext, TaskResult};

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> Millis {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as Millis).unwrap_or_default()
    }

    async fn sleep(&self, ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Wakes the worker loop and event waiters after each commit. No commit is missed: the loop
/// keeps a wake-up permit, waiters compare a generation counter. A waiter for one run
/// ([`Notifier::wait_run`]) is woken only by commits to that run (see [`RunWaiters`]).
#[derive(Debug)]
pub struct LocalNotifier {
    generation: watch::Sender<u64>,
    wake: Notify,
    runs: RunWaiters,
}

impl Default for LocalNotifier {
    fn default() -> Self {
        Self { generation: watch::channel(0).0, wake: Notify::new(), runs: RunWaiters::new() }
    }
}

impl LocalNotifier {
    /// Waits like [`Notifier::wait_run`]; `true` when `run_id`'s counter moved past `seen`
    /// (a commit to it, or to a run sharing its counter), `false` when `timeout` passed first.
    pub async fn wait_for_run(&self, run_id: &str, seen: u64, timeout: Duration) -> bool {
        self.runs.wait(run_id, seen, timeout).await
    }

    /// How many runs have a waiter right now (each holds one entry; none is kept after its
    /// last waiter leaves).
    pub fn waited_runs(&self) -> usize {
        self.runs.len()
    }
}

#[async_trait]
impl Notifier for LocalNotifier {
    fn committed(&self, run_id: &str) {
        self.generation.send_modify(|generation| *generation += 1);
        self.runs.committed(run_id);
        self.wake.notify_one();
    }

    fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    async fn wait(&self, seen: u64, timeout: Duration) {
        let mut receiver = self.generation.subscribe();
        let _ = tokio::time::timeout(timeout, receiver.wait_for(|generation| *generation != seen)).await;
    }

    fn run_generation(&self, run_id: &str) -> u64 {
        self.runs.generation(run_id)
    }

    async fn wait_run(&self, run_id: &str, seen: u64, timeout: Duration) {
        self.runs.wait(run_id, seen, timeout).await;
    }
}

/// Counters shared by the runs hashing to them.
const RUN_COUNTERS: usize = 1024;

/// Per-run waiting in bounded memory. A run's generation is one of [`RUN_COUNTERS`] fixed
/// counters, picked by hashing its id, so a commit allocates nothing; a run with a waiter has
/// an entry (its [`Notify`] and waiter count), created by its first waiter and removed when
/// its last one leaves (a dropped wait included). A commit wakes only its own run's entry; a
/// run sharing its counter with a busy one may just see its counter moved and re-read early.
#[derive(Debug)]
struct RunWaiters {
    counters: Box<[AtomicU64]>,
    entries: Mutex<HashMap<String, Waiting>>,
}

/// The waiters of one run.
#[derive(Debug)]
struct Waiting {
    notify: Arc<Notify>,
    waiters: usize,
}

impl RunWaiters {
    fn new() -> Self {
        Self { counters: (0..RUN_COUNTERS).map(|_| AtomicU64::new(0)).collect(), entries: Mutex::default() }
    }

    fn counter(&self, run_id: &str) -> &AtomicU64 {
        let mut hasher = DefaultHasher::new();
        run_id.hash(&mut hasher);
        &self.counters[(hasher.finish() % RUN_COUNTERS as u64) as usize]
    }

    fn generation(&self, run_id: &str) -> u64 {
        self.counter(run_id).load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiting>> {
        // The map stays consistent under a panic (every change is one statement).
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    fn committed(&self, run_id: &str) {
        // Counter first: a waiter that registered before this lookup is notified, one that
        // registers after it sees the counter moved.
        self.counter(run_id).fetch_add(1, Ordering::SeqCst);
        if let Some(waiting) = self.lock().get(run_id) {
            waiting.notify.notify_waiters();
        }
    }

    async fn wait(&self, run_id: &str, seen: u64, timeout: Duration) -> bool {
        let registered = Registered::new(self, run_id);
        // Created before the check: it receives every notify_waiters from here on.
        let notified = registered.notify.notified();
        if self.generation(run_id) != seen {
            return true;
        }
        tokio::time::timeout(timeout, notified).await.is_ok()
    }
}

/// One waiter's hold on its run's entry; leaving (or being dropped) releases it.
struct Registered<'a> {
    waiters: &'a RunWaiters,
    run_id: &'a str,
    notify: Arc<Notify>,
}

impl<'a> Registered<'a> {
    fn new(waiters: &'a RunWaiters, run_id: &'a str) -> Self {
        let mut entries = waiters.lock();
        let entry =
            entries.entry(run_id.to_owned()).or_insert_with(|| Waiting { notify: Arc::new(Notify::new()), waiters: 0 });
        entry.waiters += 1;
        let notify = entry.notify.clone();
        drop(entries);
        Self { waiters, run_id, notify }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let mut entries = self.waiters.lock();
        if let Some(entry) = entries.get_mut(self.run_id) {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                entries.remove(self.run_id);
                // A burst of streams leaves no large table behind.
                if entries.capacity() > 64 && entries.len() < entries.capacity() / 4 {
                    entries.shrink_to_fit();
                }
            }
        }
    }
}

/// Settings of the embedded worker loop.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// How long a claimed task stays invisible to other claims.
    pub lease_ms: u64,
    /// Tasks claimed per round.
    pub batch: usize,
    /// Longest sleep between rounds when the queue looks idle.
    pub idle_poll: Duration,
    /// Test hook: abort at this point (see [`CrashPoint`]).
    pub crash: Option<CrashPoint>,
    /// A task that still fails on this delivery fails its run with `step_delivery_exhausted`
    /// (as the serverless dispatcher does on the queue's last allowed delivery).
    pub max_deliveries: u32,
    /// How many activity attempts execute at once (`--max-concurrent-activities`).
    pub max_concurrent_activities: usize,
}

/// The default bound on concurrently executing activity attempts.
pub const DEFAULT_MAX_CONCURRENT_ACTIVITIES: usize = 256;

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            lease_ms: 30_000,
            batch: 64,
            idle_poll: Duration::from_secs(1),
            crash: None,
            max_deliveries: 10,
            max_concurrent_activities: DEFAULT_MAX_CONCURRENT_ACTIVITIES,
        }
    }
}

/// Claims and processes due tasks of `queue` until `shutdown` turns true. Steps, timers and
/// notices of a claimed batch run in the loop — the runs concurrently, each run's tasks in
/// order; activity attempts (`Execute` tasks) are
/// spawned and execute at most `max_concurrent_activities` at once (one that finds no slot
/// waits for one, renewing its lease), and settle their own deliveries.
pub async fn run_loop(
    services: Arc<Services>,
    queue: Arc<dyn LocalQueue>,
    notifier: Arc<LocalNotifier>,
    options: WorkerOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(options.max_concurrent_activities.max(1)));
    let context = TaskContext { crash: options.crash, lease: Some(queue.clone()), simulated: None };
    let mut attempts = JoinSet::new();
    let mut backoff = Duration::from_millis(50);
    while !*shutdown.borrow() {
        while attempts.try_join_next().is_some() {}
        let now = services.clock.now();
        let tasks = match queue.claim_due(now, options.lease_ms, options.batch).await {
            Ok(tasks) => tasks,
            Err(err) => {
                error!(error = %err, "claiming tasks failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        // Finished tasks are acknowledged together after the batch: one write instead of one
        // per task. A crash before that only redelivers tasks whose work is committed, which
        // they detect and acknowledge.
        let mut finished = Vec::with_capacity(tasks.len());
        let mut by_run: Vec<(String, Vec<Task>)> = Vec::new();
        let mut inline = 0;
        for task in tasks {
            if task.effect.is_outbound_io() {
                // Spawned at once; it waits for a slot there, keeping its lease alive, so a
                // full house never costs it a delivery (nor a second execution).
                let (services, queue, context, slots) =
                    (services.clone(), queue.clone(), context.clone(), slots.clone());
                let (max, lease_ms) = (options.max_deliveries, options.lease_ms);
                attempts.spawn(async move {
                    let permit = loop {
                        tokio::select! {
                            permit = slots.clone().acquire_owned() => break permit,
                            () = tokio::time::sleep(Duration::from_millis(lease_ms / 2)) => {
                                let until = services.clock.now() + lease_ms;
                                if let Err(err) = queue.release(&task.id, until).await {
                                    warn!(task = %task.id, error = %err, "keeping a waiting attempt's lease failed");
                                }
                            }
                        }
                    };
                    let Ok(_permit) = permit else { return };
                    let result = process_task(&services, &task, &context).await;
                    if settle(&services, queue.as_ref(), &task, result, max).await {
                        if let Err(err) = queue.ack(&task.id).await {
                            warn!(task = %task.id, error = %err, "acknowledging a task failed; it will be redelivered");
                        }
                    }
                });
                continue;
            }
            inline += 1;
            let target = advanced_run(&task).to_owned();
            match by_run.iter_mut().find(|(run_id, _)| *run_id == target) {
                Some((_, tasks)) => tasks.push(task),
                None => by_run.push((target, vec![task])),
            }
        }
        // Runs advance concurrently (their commits share the store's group commits); the
        // tasks of one run stay in order.
        let mut runs = JoinSet::new();
        for (_, tasks) in by_run {
            let (services, queue, context) = (services.clone(), queue.clone(), context.clone());
            let max = options.max_deliveries;
            runs.spawn(async move {
                let mut finished = Vec::with_capacity(tasks.len());
                for task in tasks {
                    let result = process_task(&services, &task, &context).await;
                    if settle(&services, queue.as_ref(), &task, result, max).await {
                        finished.push(task.id);
                    }
                }
                finished
            });
        }
        while let Some(done) = runs.join_next().await {
            match done {
                Ok(ids) => finished.extend(ids),
                Err(err) => error!(error = %err, "a run's tasks panicked; they will be redelivered"),
            }
        }
        if let Err(err) = queue.ack_many(&finished).await {
            warn!(error = %err, "acknowledging tasks failed; their leases will expire and they will be redelivered");
        }
        if inline > 0 {
            continue;
        }
        let next = queue.next_visible_at().await.ok().flatten();
        let sleep = next
            .map(|due| Duration::from_millis(due.saturating_sub(services.clock.now())))
            .unwrap_or(options.idle_poll)
            .min(options.idle_poll);
        tokio::select! {
            () = notifier.wake.notified() => {}
            () = tokio::time::sleep(sleep) => {}
            _ = shutdown.changed() => {}
        }
    }
    // Attempts still executing are abandoned: their tasks stay leased and are redelivered
    // (at least once) after the next start.
    attempts.abort_all();
}

/// The run a task advances: a child's notice advances its parent, a cancel its child. Tasks
/// advancing the same run are processed in order, not side by side (they would only race).
fn advanced_run(task: &Task) -> &str {
    match &task.effect {
        Effect::NotifyParent { parent_run_id, .. } => parent_run_id,
        Effect::CancelChild { child_run_id, .. } => child_run_id,
        _ => &task.run_id,
    }
}

/// Settles a processed task's delivery; `true` when it is finished and to be acknowledged.
async fn settle(
    services: &Services,
    queue: &dyn LocalQueue,
    task: &Task,
    result: Result<TaskResult, ServiceError>,
    max_deliveries: u32,
) -> bool {
    let settled = match result {
        Ok(TaskResult::Deferred(visible_at)) => queue.release(&task.id, visible_at).await,
        Ok(_) => return true,
        Err(err) if task.deliveries >= max_deliveries => {
            warn!(run_id = %task.run_id, task = %task.id, error = %err, "task failed on its last delivery; failing its run");
            let input = Input::DeliveryExhausted { task_id: task.id.clone() };
            match services.apply_until_committed(&task.run_id, input).await {
                Ok(()) => return true,
                Err(_) => queue.release(&task.id, services.clock.now() + 30_000).await,
            }
        }
        Err(err) => {
            warn!(run_id = %task.run_id, task = %task.id, error = %err, "task failed; it will be redelivered");
            let retry = services.clock.now() + 1_000 * u64::from(task.deliveries.min(30));
            queue.release(&task.id, retry).await
        }
    };
    if let Err(err) = settled {
        warn!(task = %task.id, error = %err, "settling a task failed; its lease will expire");
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lets every other task on the (current-thread) test runtime run until it blocks.
    async fn settle_tasks() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    /// A run id whose counter differs from `other`'s.
    fn apart_from(notifier: &LocalNotifier, other: &str) -> String {
        (0..)
            .map(|i| format!("run-b-{i}"))
            .find(|id| !std::ptr::eq(notifier.runs.counter(id), notifier.runs.counter(other)))
            .expect("some id hashes elsewhere")
    }

    #[tokio::test]
    async fn a_waiter_sleeps_through_other_runs_commits_and_wakes_on_its_own() {
        let notifier = Arc::new(LocalNotifier::default());
        let b = apart_from(&notifier, "run-a");
        let seen = notifier.run_generation("run-a");
        let waiter = tokio::spawn({
            let notifier = notifier.clone();
            async move { notifier.wait_for_run("run-a", seen, Duration::from_secs(60)).await }
        });
        settle_tasks().await;
        assert_eq!(notifier.waited_runs(), 1);
        for _ in 0..3 {
            notifier.committed(&b);
        }
        settle_tasks().await;
        assert!(!waiter.is_finished(), "a commit to another run woke the waiter");
        assert_eq!(notifier.run_generation("run-a"), seen);
        assert_ne!(notifier.generation(), 0, "the global counter still moves");
        notifier.committed("run-a");
        assert!(waiter.await.unwrap(), "woken by its own run's commit");
        assert_ne!(notifier.run_generation("run-a"), seen);
        assert_eq!(notifier.waited_runs(), 0, "the entry goes with its last waiter");
    }

    #[tokio::test]
    async fn a_bounded_wait_times_out_when_only_another_run_commits() {
        let notifier = Arc::new(LocalNotifier::default());
        let b = apart_from(&notifier, "run-a");
        let seen = notifier.run_generation("run-a");
        let waiter = tokio::spawn({
            let notifier = notifier.clone();
            async move { notifier.wait_for_run("run-a", seen, Duration::from_millis(200)).await }
        });
        settle_tasks().await;
        notifier.committed(&b);
        assert!(!waiter.await.unwrap(), "timed out, not woken");
        assert_eq!(notifier.waited_runs(), 0);
    }

    #[tokio::test]
    async fn a_commit_between_reading_the_generation_and_waiting_is_not_missed() {
        let notifier = LocalNotifier::default();
        let seen = notifier.run_generation("run-a");
        notifier.committed("run-a");
        assert!(notifier.wait_for_run("run-a", seen, Duration::from_secs(60)).await);
        assert_eq!(notifier.waited_runs(), 0);
    }

    #[tokio::test]
    async fn commits_without_waiters_and_dropped_waits_leave_no_entries() {
        let notifier = Arc::new(LocalNotifier::default());
        for i in 0..1000 {
            notifier.committed(&format!("run-{i}"));
        }
        assert_eq!(notifier.waited_runs(), 0, "a commit with no waiter allocates nothing");
        // 200 streams on 100 runs, then every one of them goes away mid-wait.
        let streams: Vec<_> = (0..200)
            .map(|i| {
                let notifier = notifier.clone();
                let run = format!("run-{}", i % 100);
                tokio::spawn(async move {
                    let seen = notifier.run_generation(&run);
                    notifier.wait_run(&run, seen, Duration::from_secs(60)).await
                })
            })
            .collect();
        settle_tasks().await;
        assert_eq!(notifier.waited_runs(), 100);
        for stream in &streams {
            stream.abort();
        }
        for stream in streams {
            let _ = stream.await;
        }
        assert_eq!(notifier.waited_runs(), 0, "a dropped wait releases its entry");
        assert!(notifier.runs.lock().capacity() <= 64, "the table shrinks back");
    }

    #[tokio::test]
    async fn two_waiters_of_one_run_share_an_entry_until_both_leave() {
        let notifier = Arc::new(LocalNotifier::default());
        let seen = notifier.run_generation("run-a");
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let notifier = notifier.clone();
                tokio::spawn(async move { notifier.wait_for_run("run-a", seen, Duration::from_secs(60)).await })
            })
            .collect();
        settle_tasks().await;
        assert_eq!(notifier.waited_runs(), 1);
        notifier.committed("run-a");
        for waiter in waiters {
            assert!(waiter.await.unwrap());
        }
        assert_eq!(notifier.waited_runs(), 0);
    }
}
