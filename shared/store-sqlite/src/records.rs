//! How a run's state is laid out (layout 4): the `runs` row holds the header (every field but
//! nodes, edges and variables, as one small JSON document) and the edges (one letter per
//! edge, in definition order); each node's state is a `run_nodes` row and each variable a
//! `run_variables` row. A commit rewrites the header and the edge letters and upserts or
//! deletes only the node and variable rows the engine reports as touched ([`Changes`]), so a
//! step writes the same few rows at node 500 as at node 5.

use std::sync::LazyLock;

use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use trellis_core::run::{Changes, ChildRun, EdgeStatus, NodeState, RunState};
use trellis_core::StoreError;

use crate::batch::Batched;
use crate::store::{corrupt, to_json, unavailable};

/// The letter of an edge resolution.
fn edge_letter(status: EdgeStatus) -> char {
    match status {
        EdgeStatus::Unresolved => 'u',
        EdgeStatus::Taken => 't',
        EdgeStatus::NotTaken => 'n',
        EdgeStatus::Failed => 'f',
    }
}

fn encode_edges(edges: &[EdgeStatus]) -> String {
    edges.iter().map(|status| edge_letter(*status)).collect()
}

fn decode_edges(letters: &str) -> Result<Vec<EdgeStatus>, StoreError> {
    letters
        .chars()
        .map(|letter| match letter {
            'u' => Ok(EdgeStatus::Unresolved),
            't' => Ok(EdgeStatus::Taken),
            'n' => Ok(EdgeStatus::NotTaken),
            'f' => Ok(EdgeStatus::Failed),
            other => Err(StoreError::Corrupt(format!("unknown edge letter {other:?}"))),
        })
        .collect()
}

/// What writing a run cost: rows and document bytes.
pub(crate) type Written = (u64, usize);

/// A run's rows to write, serialized before the write lock is taken (the group committer
/// writes many of these in one transaction).
#[derive(Debug)]
pub(crate) struct RunRows {
    run_id: String,
    tenant: String,
    workflow_id: String,
    status: &'static str,
    version: u64,
    created_at: u64,
    /// Until when a top-level run that ended is kept (its end plus its retention), indexed
    /// for the sweeper; `NULL` for a run kept until deleted.
    retains_until: Option<u64>,
    header: String,
    edges: String,
    /// Every node and variable row is rewritten (the run's other rows deleted first).
    all: bool,
    /// `(node id, (active, state))`; `None` deletes the row.
    nodes: Vec<(String, Option<(bool, String)>)>,
    /// `(name, value)`; `None` deletes the row.
    variables: Vec<(String, Option<String>)>,
}

impl RunRows {
    /// The rows of `run` that `changes` touched, plus its header and edge letters.
    pub(crate) fn of(run: &RunState, changes: &Changes) -> Result<Self, StoreError> {
        let nodes: Vec<&String> = if changes.all { run.nodes.keys().collect() } else { changes.nodes.iter().collect() };
        let variables: Vec<&String> =
            if changes.all { run.variables.keys().collect() } else { changes.variables.iter().collect() };
        Ok(Self {
            run_id: run.run_id.clone(),
            tenant: run.tenant.clone(),
            workflow_id: run.workflow.id.clone(),
            status: run.status.as_str(),
            version: run.version,
            created_at: run.created_at,
            retains_until: run.retains_until(),
            header: to_json(&run.header())?,
            edges: encode_edges(&run.edges),
            all: changes.all,
            nodes: nodes
                .into_iter()
                .map(|id| {
                    let node = run.nodes.get(id).map(|node| Ok::<_, StoreError>((node.is_active(), to_json(node)?)));
                    Ok((id.clone(), node.transpose()?))
                })
                .collect::<Result<_, StoreError>>()?,
            variables: variables
                .into_iter()
                .map(|name| Ok((name.clone(), run.variables.get(name).map(to_json).transpose()?)))
                .collect::<Result<_, StoreError>>()?,
        })
    }

    /// The run id.
    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Inserts the run row of a new run and all its records.
    pub(crate) fn insert(&self, connection: &Connection) -> Result<Written, StoreError> {
        connection
            .prepare_cached(
                "INSERT INTO runs (run_id, tenant, workflow_id, status, version, created_at, state, edges, retains_until)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .map_err(unavailable)?
            .execute(params![
                self.run_id,
                self.tenant,
                self.workflow_id,
                self.status,
                self.version,
                self.created_at,
                self.header,
                self.edges,
                self.retains_until
            ])
            .map_err(unavailable)?;
        let records = self.write_records(connection)?;
        Ok((1 + records.0, self.header.len() + self.edges.len() + records.1))
    }

    /// Replaces the run row if its version is `expected_version` and writes the records;
    /// `None` when the version moved (nothing written).
    pub(crate) fn update(&self, connection: &Connection, expected_version: u64) -> Result<Option<Written>, StoreError> {
        let updated = connection
            .prepare_cached(
                "UPDATE runs SET status = ?1, version = ?2, state = ?3, edges = ?4, retains_until = ?7
                 WHERE run_id = ?5 AND version = ?6",
            )
            .map_err(unavailable)?
            .execute(params![
                self.status,
                self.version,
                self.header,
                self.edges,
                self.run_id,
                expected_version,
                self.retains_until
            ])
            .map_err(unavailable)?;
        if updated == 0 {
            return Ok(None);
        }
        let records = self.write_records(connection)?;
        Ok(Some((1 + records.0, self.header.len() + self.edges.len() + records.1)))
    }

    fn write_records(&self, connection: &Connection) -> Result<Written, StoreError> {
        if self.all {
            for table in ["DELETE FROM run_nodes WHERE run_id = ?1", "DELETE FROM run_variables WHERE run_id = ?1"] {
                connection.prepare_cached(table).map_err(unavailable)?.execute([&self.run_id]).map_err(unavailable)?;
            }
        }
        static NODES: LazyLock<Batched> = LazyLock::new(|| {
            Batched::new("INSERT OR REPLACE INTO run_nodes (run_id, node_id, active, state) VALUES", 4, "")
        });
        static VARIABLES: LazyLock<Batched> =
            LazyLock::new(|| Batched::new("INSERT OR REPLACE INTO run_variables (run_id, name, value) VALUES", 3, ""));
        let mut written: Written = (0, 0);
        let puts: Vec<(&String, bool, &String)> = self
            .nodes
            .iter()
            .filter_map(|(node_id, node)| node.as_ref().map(|(active, document)| (node_id, *active, document)))
            .collect();
        written.0 += NODES.execute(connection, &puts, |statement, first, (node_id, active, document)| {
            statement.raw_bind_parameter(first, &self.run_id)?;
            statement.raw_bind_parameter(first + 1, node_id)?;
            statement.raw_bind_parameter(first + 2, active)?;
            statement.raw_bind_parameter(first + 3, document)
        })? as u64;
        written.1 += puts.iter().map(|(_, _, document)| document.len()).sum::<usize>();
        if puts.len() < self.nodes.len() {
            let mut drop = connection
                .prepare_cached("DELETE FROM run_nodes WHERE run_id = ?1 AND node_id = ?2")
                .map_err(unavailable)?;
            for (node_id, _) in self.nodes.iter().filter(|(_, node)| node.is_none()) {
                drop.execute(params![self.run_id, node_id]).map_err(unavailable)?;
                written.0 += 1;
            }
        }
        let puts: Vec<(&String, &String)> =
            self.variables.iter().filter_map(|(name, value)| value.as_ref().map(|value| (name, value))).collect();
        written.0 += VARIABLES.execute(connection, &puts, |statement, first, (name, document)| {
            statement.raw_bind_parameter(first, &self.run_id)?;
            statement.raw_bind_parameter(first + 1, name)?;
            statement.raw_bind_parameter(first + 2, document)
        })? as u64;
        written.1 += puts.iter().map(|(_, document)| document.len()).sum::<usize>();
        if puts.len() < self.variables.len() {
            let mut drop = connection
                .prepare_cached("DELETE FROM run_variables WHERE run_id = ?1 AND name = ?2")
                .map_err(unavailable)?;
            for (name, _) in self.variables.iter().filter(|(_, value)| value.is_none()) {
                drop.execute(params![self.run_id, name]).map_err(unavailable)?;
                written.0 += 1;
            }
        }
        Ok(written)
    }
}

/// How much of a run to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Depth {
    /// Everything.
    Full,
    /// The header, the variables and the active nodes (scheduled, parked, waiting,
    /// executing): what a snapshot, a listing or an event page needs.
    Summary,
}

/// Reads the run `run_id`; with the rows and bytes read.
pub(crate) fn read_run(
    connection: &Connection,
    run_id: &str,
    depth: Depth,
) -> Result<Option<(RunState, Written)>, StoreError> {
    let row = connection
        .prepare_cached("SELECT state, edges FROM runs WHERE run_id = ?1")
        .map_err(unavailable)?
        .query_row([run_id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)))
        .optional()
        .map_err(unavailable)?;
    let Some((header, edges)) = row else { return Ok(None) };
    let mut read: Written = (1, header.len() + edges.len());
    let mut run: RunState = serde_json::from_str(&header).map_err(corrupt)?;
    run.edges = decode_edges(&edges)?;
    if depth == Depth::Full || !run.status.is_terminal() {
        let sql = match depth {
            Depth::Full => "SELECT node_id, state FROM run_nodes WHERE run_id = ?1",
            Depth::Summary => "SELECT node_id, state FROM run_nodes WHERE run_id = ?1 AND active = 1",
        };
        let mut query = connection.prepare_cached(sql).map_err(unavailable)?;
        let rows = query.query_map([run_id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)));
        for row in rows.map_err(unavailable)? {
            let (node_id, document) = row.map_err(unavailable)?;
            read = (read.0 + 1, read.1 + document.len());
            let node: NodeState = serde_json::from_str(&document).map_err(corrupt)?;
            run.nodes.insert(node_id, node);
        }
    }
    let mut query =
        connection.prepare_cached("SELECT name, value FROM run_variables WHERE run_id = ?1").map_err(unavailable)?;
    let rows = query.query_map([run_id], |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?)));
    for row in rows.map_err(unavailable)? {
        let (name, document) = row.map_err(unavailable)?;
        read = (read.0 + 1, read.1 + document.len());
        let value: Value = serde_json::from_str(&document).map_err(corrupt)?;
        run.variables.insert(name, value);
    }
    Ok(Some((run, read)))
}

/// Layout 3 → 4: splits every run's state document into its header, edge letters and node
/// and variable rows. A run recorded before runs listed their children (children only on
/// their nodes) gets its list filled from the nodes, so a snapshot never needs the nodes of
/// a finished run.
pub(crate) fn split_state_documents(connection: &Connection) -> Result<(), StoreError> {
    let has_edges: bool = connection
        .query_row("SELECT COUNT(*) FROM pragma_table_info('runs') WHERE name = 'edges'", [], |row| row.get(0))
        .map_err(unavailable)?;
    if !has_edges {
        connection.execute_batch("ALTER TABLE runs ADD COLUMN edges TEXT NOT NULL DEFAULT '';").map_err(unavailable)?;
    }
    let mut documents = Vec::new();
    {
        let mut query = connection.prepare("SELECT run_id, version, state FROM runs").map_err(unavailable)?;
        let rows = query
            .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, u64>(1)?, row.get::<_, String>(2)?)))
            .map_err(unavailable)?;
        for row in rows {
            documents.push(row.map_err(unavailable)?);
        }
    }
    for (run_id, version, document) in documents {
        let mut run: RunState = serde_json::from_str(&document).map_err(corrupt)?;
        if run.child_runs.is_empty() {
            run.child_runs = run
                .nodes
                .iter()
                .filter_map(|(node_id, node)| {
                    Some(ChildRun {
                        run_id: node.child_run_id.clone()?,
                        node_id: node_id.clone(),
                        workflow_id: node.child_workflow_id.clone()?,
                        status: node.child_status.unwrap_or(trellis_core::RunStatus::Pending),
                    })
                })
                .collect();
        }
        if RunRows::of(&run, &Changes::all())?.update(connection, version)?.is_none() {
            return Err(StoreError::Corrupt(format!("run {run_id} changed while it was migrated")));
        }
    }
    Ok(())
}
