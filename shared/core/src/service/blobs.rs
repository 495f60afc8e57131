//! A run's large values (see [`crate::blob`]) at the store's edge: what a commit or a
//! creation writes is spilled — its events' payloads, and the run's inputs, variables, node
//! outputs, executing activities' prepared requests and outputs it touched (all of them once
//! the run has blobs: a store may write the whole state) — the new blobs are stored before
//! the commit, and the in-memory run gets its values back afterwards ([`Services::unspill`]).
//! Other parts of a run's state (interrupt resume values, the per-child records of a
//! parallel fan-out or a dispatch) stay inline; a commit they make too large for the store
//! fails the run with `payload_too_large` (see `commit`), never a retry. A run read for the engine has its
//! references read back ([`Services::hydrate`]); so do a source's outputs that a fork or a
//! rerun takes. `GET /v1/runs/{id}/blobs/{ref}` is [`Services::blob_value`].

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::Services;
use crate::blob::{self, Blob};
use crate::error::{ServiceError, StoreError};
use crate::event::RunEvent;
use crate::run::{Changes, RunState};

/// Where a spilled value of a run sat.
#[derive(Debug)]
enum Slot {
    Input(String),
    Variable(String),
    Node(String),
    Request(String),
    Outputs,
}

/// The values a commit replaced with references in the run it wrote, to put back.
#[derive(Debug, Default)]
#[must_use]
pub(super) struct Spilled(Vec<(Slot, Value)>);

impl Services {
    /// Spills the parts of `run` (those `changes` names, or all: `None`, or a run that has
    /// blobs) and of `events` over [`blob::INLINE_LIMIT`], and stores the new blobs; `limit`
    /// overrides it (a store refused the commit as too large).
    pub(super) async fn spill(
        &self,
        run: &mut RunState,
        changes: Option<&Changes>,
        events: &mut [RunEvent],
        limit: Option<usize>,
    ) -> Result<Spilled, StoreError> {
        if !self.limits.blob_storage {
            return Ok(Spilled::default());
        }
        let limit = limit.unwrap_or(blob::INLINE_LIMIT);
        let mut blobs = Vec::new();
        for event in events.iter_mut() {
            blob::spill(&mut event.payload, limit, &mut blobs);
        }
        let everything = changes.is_none_or(|changes| changes.all) || !run.blobs.is_empty();
        let mut spilled = Spilled::default();
        let mut keep = |slot: Slot, value: &mut Value, blobs: &mut Vec<Blob>| {
            // Most values fit: measured without a copy, kept as they are.
            if blob::size(&*value) <= limit {
                return;
            }
            let original = value.clone();
            if blob::spill(value, limit, blobs) {
                spilled.0.push((slot, original));
            }
        };
        if everything {
            for (name, value) in run.inputs.iter_mut() {
                keep(Slot::Input(name.clone()), value, &mut blobs);
            }
        }
        let variables: Vec<String> = match changes {
            Some(changes) if !everything => changes.variables.iter().cloned().collect(),
            _ => run.variables.keys().cloned().collect(),
        };
        for name in variables {
            if let Some(value) = run.variables.get_mut(&name) {
                keep(Slot::Variable(name), value, &mut blobs);
            }
        }
        let nodes: Vec<String> = match changes {
            Some(changes) if !everything => changes.nodes.iter().cloned().collect(),
            _ => run.nodes.keys().cloned().collect(),
        };
        for node_id in nodes {
            let Some(node) = run.nodes.get_mut(&node_id) else { continue };
            // An executing activity's prepared request (a large value it sends on).
            if let Some(activity) = node.activity.as_mut() {
                keep(Slot::Request(node_id.clone()), &mut activity.request, &mut blobs);
            }
            if node.outputs.is_empty() {
                continue;
            }
            let mut outputs = Value::Object(std::mem::take(&mut node.outputs));
            keep(Slot::Node(node_id), &mut outputs, &mut blobs);
            node.outputs = into_map(outputs);
        }
        if !run.outputs.is_empty() {
            let mut outputs = Value::Object(std::mem::take(&mut run.outputs));
            keep(Slot::Outputs, &mut outputs, &mut blobs);
            run.outputs = into_map(outputs);
        }
        // Stored before the commit that refers to them; a blob the run already has is not
        // sent again.
        blobs.retain(|blob| !run.blobs.contains_key(&blob.reference));
        if !blobs.is_empty() {
            self.store.put_blobs(run, &blobs).await?;
            for blob in &blobs {
                run.blobs.insert(blob.reference.clone(), blob.bytes.len() as u64);
            }
        }
        Ok(spilled)
    }

    /// Puts back in `run` the values [`Services::spill`] replaced.
    pub(super) fn unspill(run: &mut RunState, spilled: Spilled) {
        for (slot, value) in spilled.0 {
            match slot {
                Slot::Input(name) => {
                    run.inputs.insert(name, value);
                }
                Slot::Variable(name) => {
                    run.variables.insert(name, value);
                }
                Slot::Node(node_id) => {
                    if let Some(node) = run.nodes.get_mut(&node_id) {
                        node.outputs = into_map(value);
                    }
                }
                Slot::Request(node_id) => {
                    if let Some(activity) = run.nodes.get_mut(&node_id).and_then(|node| node.activity.as_mut()) {
                        activity.request = value;
                    }
                }
                Slot::Outputs => run.outputs = into_map(value),
            }
        }
    }

    /// Reads back the values of the references in `run` (a run without blobs is left
    /// untouched, unwalked).
    pub async fn hydrate(&self, run: &mut RunState) -> Result<(), ServiceError> {
        if run.blobs.is_empty() {
            return Ok(());
        }
        let mut references = Vec::new();
        let requests = run.nodes.values().filter_map(|node| node.activity.as_ref().map(|activity| &activity.request));
        run.inputs.values().chain(run.variables.values()).chain(requests).for_each(|value| {
            blob::references(value, &mut references);
        });
        for outputs in run.nodes.values().map(|node| &node.outputs).chain([&run.outputs]) {
            blob::map_references(outputs, &mut references);
        }
        if references.is_empty() {
            return Ok(());
        }
        let values = self.blob_values(&run.run_id, &references).await?;
        run.inputs.values_mut().chain(run.variables.values_mut()).for_each(|value| blob::hydrate(value, &values));
        for activity in run.nodes.values_mut().filter_map(|node| node.activity.as_mut()) {
            blob::hydrate(&mut activity.request, &values);
        }
        for outputs in run.nodes.values_mut().map(|node| &mut node.outputs).chain([&mut run.outputs]) {
            let mut whole = Value::Object(std::mem::take(outputs));
            blob::hydrate(&mut whole, &values);
            *outputs = into_map(whole);
        }
        Ok(())
    }

    /// Run `run_id` with its values read back.
    pub(super) async fn load_hydrated(&self, run_id: &str) -> Result<Option<RunState>, ServiceError> {
        let Some(mut run) = self.store.load_run(run_id).await? else { return Ok(None) };
        self.hydrate(&mut run).await?;
        Ok(Some(run))
    }

    /// Reads back the references in `values`, blobs of run `run_id` (a source's outputs).
    pub(super) async fn hydrate_map(&self, run_id: &str, values: &mut Map<String, Value>) -> Result<(), ServiceError> {
        let mut whole = Value::Object(std::mem::take(values));
        let mut references = Vec::new();
        blob::references(&whole, &mut references);
        if !references.is_empty() {
            let found = self.blob_values(run_id, &references).await?;
            blob::hydrate(&mut whole, &found);
        }
        *values = into_map(whole);
        Ok(())
    }

    /// The values of `references`, blobs of `run_id`; a reference the run does not hold is
    /// left out (the document keeps it as written).
    async fn blob_values(&self, run_id: &str, references: &[String]) -> Result<BTreeMap<String, Value>, ServiceError> {
        let mut values = BTreeMap::new();
        for reference in references {
            if let Some(bytes) = self.store.blob(run_id, reference).await? {
                let value = serde_json::from_slice(&bytes)
                    .map_err(|error| crate::error::StoreError::Corrupt(format!("blob {reference}: {error}")))?;
                values.insert(reference.clone(), value);
            }
        }
        Ok(values)
    }

    /// `GET /v1/runs/{runId}/blobs/{ref}`: the JSON of `tenant`'s run's blob `reference`;
    /// `404` for a run the caller cannot see or a reference it does not hold.
    pub async fn blob_value(&self, tenant: &str, run_id: &str, reference: &str) -> Result<Vec<u8>, ServiceError> {
        let run = self.get_run(tenant, run_id).await?;
        if !run.blobs.contains_key(reference) {
            return Err(ServiceError::NotFound { what: "blob" });
        }
        self.store.blob(run_id, reference).await?.ok_or(ServiceError::NotFound { what: "blob" })
    }
}

fn into_map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        // A whole outputs object spilled: kept under its reference's own key.
        other => {
            let mut map = Map::new();
            if let Some(inner) = other.get(blob::MARKER) {
                map.insert(blob::MARKER.to_owned(), inner.clone());
            }
            map
        }
    }
}
