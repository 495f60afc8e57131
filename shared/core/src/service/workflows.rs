//! Workflow definitions: storing them (from directories at start, or registered) and finding
//! the one a tenant means by an id.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::Services;
use crate::error::ServiceError;
use crate::model::Workflow;
use crate::ports::{StoredWorkflow, GLOBAL_NAMESPACE};

fn stored(namespace: &str, workflow: &Workflow) -> StoredWorkflow {
    StoredWorkflow {
        namespace: namespace.to_owned(),
        workflow_id: workflow.id().to_owned(),
        version: workflow.definition.version.clone(),
        content_hash: workflow.content_hash.clone(),
        document: workflow.document.clone(),
    }
}

/// The JSON documents of a directory of definitions, read by [`read_definition_files`].
#[derive(Debug, Default)]
pub struct DefinitionFiles {
    /// `(file name, document)` of every top-level `*.json` file that parsed, by file name.
    pub documents: Vec<(String, Value)>,
    /// Files that could not be read or parsed, with the reason.
    pub refused: Vec<(String, String)>,
}

/// Reads every top-level `*.json` file of `dir`. Blocking file I/O: call it before the async
/// runtime or on a blocking thread (`tokio::task::spawn_blocking`), never on an async task.
pub fn read_definition_files(dir: &Path) -> Result<DefinitionFiles, ServiceError> {
    let entries = std::fs::read_dir(dir).map_err(|error| {
        ServiceError::validation(
            format!("cannot read workflow directory {}: {error}", dir.display()),
            serde_json::json!({}),
        )
    })?;
    let mut paths: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file() && path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    paths.sort();
    let mut files = DefinitionFiles::default();
    for path in paths {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match std::fs::read_to_string(&path).map(|text| serde_json::from_str::<Value>(&text)) {
            Ok(Ok(document)) => files.documents.push((name, document)),
            Ok(Err(error)) => files.refused.push((name, format!("not JSON: {error}"))),
            Err(error) => files.refused.push((name, format!("unreadable: {error}"))),
        }
    }
    Ok(files)
}

/// What loading a directory of definitions did.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Ids stored and runnable.
    pub runnable: Vec<String>,
    /// Ids stored but not runnable here, with the reason.
    pub not_runnable: Vec<(String, String)>,
    /// Files refused, with the reason.
    pub refused: Vec<(String, String)>,
}

impl Services {
    /// Validates and stores a definition in `namespace` (operator-supplied definitions: a
    /// changed document under the same version label becomes the latest; runs already pinned
    /// to the old document keep it).
    pub async fn put_workflow(&self, namespace: &str, document: Value) -> Result<Arc<Workflow>, ServiceError> {
        let workflow = Workflow::compile_with(document, &self.nodes, self.bounds())?;
        self.check_schedules(&workflow.document)?;
        self.store.put_workflow(&stored(namespace, &workflow), self.clock.now()).await?;
        let compiled = self.compile_cached(workflow.document.clone())?;
        self.sync_schedules(namespace, &compiled).await?;
        Ok(compiled)
    }

    /// Registers a definition for `tenant` (`POST /v1/workflows`). Versions are immutable:
    /// the same document again is accepted (`false`: nothing new), another document under an
    /// existing version label is a conflict. A definition this host cannot run is refused.
    ///
    /// Conformance-only node kinds ([`crate::nodes::MOCK_TYPE_IDS`]) are refused here
    /// (`400`, rule `typeId_refused`); [`Services::register_workflow_as`] admits them for a
    /// test-scope caller on a host with its seams on.
    pub async fn register_workflow(
        &self,
        tenant: &str,
        document: Value,
    ) -> Result<(Arc<Workflow>, bool), ServiceError> {
        self.register_checked(tenant, document, false).await
    }

    /// [`Services::register_workflow`] for `principal`'s tenant: a test-scope principal on a
    /// host with its test seams on may register conformance-only kinds (the mock agent, the
    /// cost emitter), like the global namespace's fixtures.
    pub async fn register_workflow_as(
        &self,
        principal: &crate::run::Principal,
        document: Value,
    ) -> Result<(Arc<Workflow>, bool), ServiceError> {
        let mocks_allowed = self.test_seams && principal.test_scope;
        self.register_checked(&principal.tenant, document, mocks_allowed).await
    }

    /// A dry run of [`Services::register_workflow_as`] (`POST /v1/workflows:validate`): the
    /// same checks, the same errors (a version label already registered with other content
    /// included), nothing stored. Returns the compiled definition.
    pub async fn validate_workflow_as(
        &self,
        principal: &crate::run::Principal,
        document: Value,
    ) -> Result<Workflow, ServiceError> {
        let mocks_allowed = self.test_seams && principal.test_scope;
        let (workflow, _) = self.check_registration(&principal.tenant, document, mocks_allowed).await?;
        Ok(workflow)
    }

    async fn register_checked(
        &self,
        tenant: &str,
        document: Value,
        mocks_allowed: bool,
    ) -> Result<(Arc<Workflow>, bool), ServiceError> {
        let (workflow, existing) = self.check_registration(tenant, document, mocks_allowed).await?;
        if let Some(existing) = existing {
            return Ok((self.compile_cached(existing.document)?, false));
        }
        self.store.put_workflow(&stored(tenant, &workflow), self.clock.now()).await?;
        let compiled = self.compile_cached(workflow.document.clone())?;
        self.sync_schedules(tenant, &compiled).await?;
        Ok((compiled, true))
    }

    /// Every check of a registration, reading only: the compiled definition and, when this
    /// exact document is already registered under its version label, the stored copy.
    async fn check_registration(
        &self,
        tenant: &str,
        document: Value,
        mocks_allowed: bool,
    ) -> Result<(Workflow, Option<StoredWorkflow>), ServiceError> {
        let document = crate::model::normalize_spelling(document);
        self.refusal_scan(&document).await?;
        let workflow = Workflow::compile_with(document, &self.nodes, self.bounds())?;
        self.check_schedules(&workflow.document)?;
        if let Some((index, node_id, type_id)) = crate::nodes::find_mock_node(&workflow.definition) {
            if !mocks_allowed {
                return Err(crate::error::DefinitionError::Invalid {
                    path: format!("/nodes/{index}/typeId"),
                    rule: "typeId_refused",
                    message: format!(
                        "node `{node_id}`: `{type_id}` is conformance-only; a tenant may register it only with a \
                         test-scope key on a host with its test seams on"
                    ),
                }
                .into());
            }
        }
        if let Some(gap) = &workflow.gap {
            return Err(ServiceError::CapabilityRequired { message: gap.message.clone(), details: gap.details() });
        }
        let existing = self.store.workflow_by_label(tenant, workflow.id(), &workflow.definition.version).await?;
        if let Some(existing) = existing {
            if existing.content_hash == workflow.content_hash {
                return Ok((workflow, Some(existing)));
            }
            return Err(ServiceError::Conflict {
                code: "version_conflict",
                message: "this workflow version is already registered with other content; versions are immutable"
                    .to_owned(),
                details: serde_json::json!({ "workflowId": workflow.id(), "version": workflow.definition.version }),
            });
        }
        Ok((workflow, None))
    }

    /// The latest definition `workflow_id` visible to `tenant`: its own first, then the
    /// bundled global namespace. Returns the namespace it was found in.
    pub async fn find_workflow(
        &self,
        tenant: &str,
        workflow_id: &str,
    ) -> Result<(String, Arc<Workflow>), ServiceError> {
        for namespace in [tenant, GLOBAL_NAMESPACE] {
            // The hash is a keyed read of one column; the document is read (and compiled)
            // only the first time this version is asked for.
            let Some(hash) = self.store.latest_workflow_hash(namespace, workflow_id).await? else { continue };
            if let Some(workflow) = self.compiled_by_hash(&hash) {
                return Ok((namespace.to_owned(), workflow));
            }
            if let Some(stored) = self.store.latest_workflow(namespace, workflow_id).await? {
                return Ok((namespace.to_owned(), self.compile_cached(stored.document)?));
            }
        }
        Err(ServiceError::NotFound { what: "workflow" })
    }

    /// Stores the definitions of a directory ([`read_definition_files`], which the caller runs
    /// off the async runtime) in the global namespace. A file that is not a valid definition
    /// is refused (reported, not fatal); a definition with node kinds this host does not run
    /// is stored but reported as not runnable.
    pub async fn load_definition_files(&self, files: DefinitionFiles) -> Result<LoadReport, ServiceError> {
        let mut report = LoadReport { refused: files.refused, ..LoadReport::default() };
        for (name, document) in files.documents {
            match self.put_workflow(GLOBAL_NAMESPACE, document).await {
                Ok(workflow) => match &workflow.gap {
                    None => report.runnable.push(workflow.id().to_owned()),
                    Some(gap) => report.not_runnable.push((workflow.id().to_owned(), gap.message.clone())),
                },
                Err(ServiceError::Validation { message, details }) => {
                    report.refused.push((name, format!("{message} {details}")));
                }
                Err(error) => return Err(error),
            }
        }
        Ok(report)
    }
}

/// The host setting recording which bundled fixture set a store holds (see
/// [`Services::bundled_fixtures`]).
const BUNDLED_SETTING: &str = "bundled-fixtures";

impl Services {
    /// Stores the bundled fixtures ([`Services::load_bundled_fixtures`]) unless the store
    /// already holds this exact set for this node registry, and returns the ids to advertise
    /// ([`Services::advertised_fixtures`]). A host setting records the set's digest and the
    /// ids, so a cold start against a store that has them costs one settings read instead of
    /// a read (and a compile) per fixture — what a serverless API function pays at every cold
    /// start.
    pub async fn bundled_fixtures(&self) -> Result<Vec<String>, ServiceError> {
        let digest = crate::model::content_hash(&serde_json::json!({
            "fixtures": crate::bundled::FIXTURES,
            "nodes": self.nodes.type_ids(),
        }));
        if let Some(Value::Object(record)) = self.store.setting(BUNDLED_SETTING).await? {
            let ids = record.get("advertised").and_then(Value::as_array);
            if let (Some(Value::String(stored)), Some(ids)) = (record.get("digest"), ids) {
                if *stored == digest {
                    return Ok(ids.iter().filter_map(|id| id.as_str().map(str::to_owned)).collect());
                }
            }
        }
        self.load_bundled_fixtures().await?;
        let advertised = self.advertised_fixtures().await;
        let record = serde_json::json!({"digest": digest, "advertised": advertised});
        self.store.put_setting(BUNDLED_SETTING, &record).await?;
        Ok(advertised)
    }

    /// Stores the vendored conformance fixtures in the global namespace. A document already
    /// stored is left as it is, so a cold start writes nothing after the first.
    pub async fn load_bundled_fixtures(&self) -> Result<(), ServiceError> {
        for (_, text) in crate::bundled::FIXTURES {
            let document: Value = serde_json::from_str(text).map_err(|_| ServiceError::Internal)?;
            let workflow = self.compile(document)?;
            let stored = self.store.workflow_version(GLOBAL_NAMESPACE, workflow.id(), &workflow.content_hash).await?;
            if stored.is_none() {
                self.put_workflow(GLOBAL_NAMESPACE, workflow.document.clone()).await?;
            }
        }
        Ok(())
    }

    /// The fixture ids to advertise: entries of the expectation table whose definition is
    /// loaded and runnable here.
    pub async fn advertised_fixtures(&self) -> Vec<String> {
        let mut advertised = Vec::new();
        for id in crate::bundled::expected_fixture_ids() {
            if let Ok((_, workflow)) = self.find_workflow(GLOBAL_NAMESPACE, &id).await {
                if workflow.gap.is_none() {
                    advertised.push(id);
                }
            }
        }
        advertised
    }
}

/// One entry of the workflow listing: the latest definition an id resolves to for a tenant.
#[derive(Debug, Clone)]
pub struct ListedWorkflow {
    /// `true` for the read-only global namespace (bundled fixtures, `OPENWOP_FIXTURES_DIR`,
    /// `--workflows`), `false` for the tenant's own registration.
    pub global: bool,
    /// The definition.
    pub workflow: Arc<Workflow>,
}

impl Services {
    /// The workflows `tenant` can start, by id, after `after`, at most `limit`: its own
    /// registrations and the global namespace, an id of both resolving to the tenant's own
    /// (as [`Services::find_workflow`] does). Never another tenant's.
    pub async fn list_workflows(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ListedWorkflow>, ServiceError> {
        let mut ids = std::collections::BTreeMap::new();
        for id in self.store.workflow_ids(GLOBAL_NAMESPACE).await? {
            ids.insert(id, GLOBAL_NAMESPACE);
        }
        for id in self.store.workflow_ids(tenant).await? {
            ids.insert(id, tenant);
        }
        let start = after.map_or(std::ops::Bound::Unbounded, |after| std::ops::Bound::Excluded(after.to_owned()));
        let mut listed = Vec::new();
        for (id, namespace) in ids.range((start, std::ops::Bound::Unbounded)).take(limit) {
            if let Some(stored) = self.store.latest_workflow(namespace, id).await? {
                let workflow = self.compile_cached(stored.document)?;
                listed.push(ListedWorkflow { global: *namespace == GLOBAL_NAMESPACE, workflow });
            }
        }
        Ok(listed)
    }
}
