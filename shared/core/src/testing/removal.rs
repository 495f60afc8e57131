//! Deleting a run ([`crate::ports::RunStore::delete_run`]): everything of it goes — state,
//! log, queued effects, its place in the listing — its size is what `run_bytes` said, a
//! second delete is harmless, and another run of the tenant is untouched.

use std::sync::Arc;

use super::{chain_workflow, pending_run};
use crate::engine::{self, Input};
use crate::ports::{RunFilter, Store};

pub(super) async fn deleting_a_run_leaves_nothing_of_it(store: Arc<dyn Store>) {
    let workflow = chain_workflow();
    let mut kept = None;
    for run_id in ["run-del", "run-del-kept"] {
        let mut run = pending_run(&workflow, run_id, "t-del");
        let outcome = engine::apply(&workflow, &mut run, Input::Start, 1_000);
        run.version = 1;
        store.create_run(&run, &outcome.events, &outcome.effects, None).await.unwrap();
        let expected = run.version;
        let step = engine::apply(&workflow, &mut run, Input::Step { node_id: "a".into(), activation: 1 }, 1_001);
        run.version = expected + 1;
        store.commit(&run, expected, &step.events, &step.effects).await.unwrap();
        kept = Some(run);
    }
    let bytes = store.run_bytes("run-del").await.unwrap();
    assert!(bytes > 0, "a stored run has a size");
    assert_eq!(store.delete_run("run-del").await.unwrap(), bytes, "the delete frees what run_bytes said");
    assert_eq!(store.load_run("run-del").await.unwrap(), None);
    assert_eq!(store.load_run_summary("run-del").await.unwrap(), None);
    assert!(store.events_after("run-del", None, 100).await.unwrap().is_empty());
    assert!(store.pending_effects("run-del").await.unwrap().is_empty(), "no task of it is left to run");
    let listed = store.list_runs("t-del", &RunFilter::default(), None, 100).await.unwrap();
    assert_eq!(listed.iter().map(|run| run.run_id.as_str()).collect::<Vec<_>>(), ["run-del-kept"]);
    assert_eq!(store.run_bytes("run-del").await.unwrap(), 0);
    assert_eq!(store.delete_run("run-del").await.unwrap(), 0, "deleting twice is harmless");
    store.reclaim_space().await.unwrap();
    assert_eq!(store.load_run("run-del-kept").await.unwrap(), kept, "another run is untouched");
    assert_eq!(store.events_after("run-del-kept", None, 100).await.unwrap().len(), 3);
}
