//! A run's blobs ([`crate::ports::BlobStore`]): read back byte for byte, scoped to their run,
//! stored again without harm, counted in the run's size and deleted with it.

use std::sync::Arc;

use serde_json::json;

use super::{chain_workflow, pending_run};
use crate::blob::blob_of;
use crate::engine::{self, Input};
use crate::ports::Store;

pub(super) async fn blobs_belong_to_their_run(store: Arc<dyn Store>) {
    let workflow = chain_workflow();
    let mut runs = Vec::new();
    for run_id in ["run-blob", "run-blob-other"] {
        let mut run = pending_run(&workflow, run_id, "t-blob");
        let outcome = engine::apply(&workflow, &mut run, Input::Start, 1_000);
        run.version = 1;
        store.create_run(&run, &outcome.events, &outcome.effects, None).await.unwrap();
        runs.push(run);
    }
    let large = blob_of(&json!({"body": "x".repeat(1_500_000)}));
    let small = blob_of(&json!([1, 2, 3]));
    let before = store.run_bytes("run-blob").await.unwrap();
    store.put_blobs(&runs[0], &[large.clone(), small.clone()]).await.unwrap();
    store.put_blobs(&runs[0], std::slice::from_ref(&small)).await.unwrap();
    assert_eq!(store.blob("run-blob", &large.reference).await.unwrap().as_deref(), Some(&large.bytes[..]));
    assert_eq!(store.blob("run-blob", &small.reference).await.unwrap().as_deref(), Some(&small.bytes[..]));
    assert_eq!(store.blob("run-blob", "0123").await.unwrap(), None, "an unknown reference");
    assert_eq!(store.blob("run-blob-other", &large.reference).await.unwrap(), None, "another run's blob");
    let with = store.run_bytes("run-blob").await.unwrap();
    assert!(with >= before + large.bytes.len() as u64, "the run's size counts its blobs: {before} → {with}");
    assert_eq!(store.delete_run("run-blob").await.unwrap(), with, "the delete frees what run_bytes said");
    assert_eq!(store.blob("run-blob", &large.reference).await.unwrap(), None, "deleted with the run");
    assert_eq!(store.blob("run-blob", &small.reference).await.unwrap(), None);
    store.delete_run("run-blob-other").await.unwrap();
}
