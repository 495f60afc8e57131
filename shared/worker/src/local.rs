//! The embedded worker loop and the in-process adapters it needs: the system clock and a
//! notifier that wakes the loop and event waiters on every commit.

use std::sync::Arc;
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

/// Wakes the worker loop and long-polls after each commit. No commit is missed: the loop
/// keeps a wake-up permit, waiters compare a generation counter.
#[derive(Debug)]
pub struct LocalNotifier {
    generation: watch::Sender<u64>,
    wake: Notify,
}

impl Default for LocalNotifier {
    fn default() -> Self {
        Self { generation: watch::channel(0).0, wake: Notify::new() }
    }
}

#[async_trait]
impl Notifier for LocalNotifier {
    fn committed(&self, _run_id: &str) {
        self.generation.send_modify(|generation| *generation += 1);
        self.wake.notify_one();
    }

    fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    async fn wait(&self, seen: u64, timeout: Duration) {
        let mut receiver = self.generation.subscribe();
        let _ = tokio::time::timeout(timeout, receiver.wait_for(|generation| *generation != seen)).await;
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
/// notices run in the loop, one after another; activity attempts (`Execute` tasks) are
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
        let mut inline = 0;
        for task in tasks {
            if matches!(task.effect, Effect::Execute { .. }) {
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
            let result = process_task(&services, &task, &context).await;
            if settle(&services, queue.as_ref(), &task, result, options.max_deliveries).await {
                finished.push(task.id.clone());
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
