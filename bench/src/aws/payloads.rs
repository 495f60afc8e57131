//! What a large value costs on the serverless path (`trellis_core::blob`): runs of a
//! `core.http.request` GET (its body cap raised to 8 MiB) then a `core.noop`, the body a JSON
//! document of 1 KiB to 5 MiB from a loopback server in this process, with the blob bucket on
//! the emulator (moto's S3). Per run: DynamoDB write and read units and requests, S3 PUTs and
//! GETs and the bytes stored — a value over 256 KiB goes to S3 once per run and the commit
//! pages stay small; one just under it stays inline until a page would pass DynamoDB's 400 KB
//! item limit, when the commit is made again with its values over 4 KiB in S3.

use serde_json::json;
use trellis_core::run::Principal;
use trellis_testkit::http_server::{Reply, TestServer};

use crate::Apps;

/// The body sizes measured, in bytes of JSON.
const SIZES: [usize; 5] = [1 << 10, 100 << 10, 200 << 10, 1 << 20, 5 << 20];

/// Measures `runs` runs per body size and prints a table.
pub(crate) async fn figures(apps: &Apps<'_>, sqs: &aws_sdk_sqs::Client, queues: [&str; 2], runs: usize) {
    let server = TestServer::start().await;
    let principal =
        Principal { tenant: "bench".into(), subject: "bench".into(), key_class: "api-key".into(), test_scope: false };
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    println!(
        "trellis-bench-aws --payloads: {runs} runs per body size of a GET (8 MiB cap) then a noop, emulated stack"
    );
    println!(
        "{:>9} {:>9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>12} {:>10}",
        "body", "WRU/run", "RRU/run", "writes/run", "reads/run", "S3 PUT", "S3 GET", "S3 MB/run", "completed"
    );
    for size in SIZES {
        let path = format!("/body/{size}");
        // `{"data": "x…"}`: the string fills the size.
        server.route(&path, vec![Reply::json(200, &json!({"data": "x".repeat(size.saturating_sub(12))}))]);
        let workflow = format!("bench-payload-{size}");
        let definition = json!({
            "id": workflow, "name": workflow, "version": "1",
            "nodes": [
                {"id": "fetch", "typeId": "core.http.request",
                 "config": {"url": server.url(&path), "maxResponseBodyBytes": 8_388_608, "timeoutMs": 30_000}},
                {"id": "after", "typeId": "core.noop"},
            ],
            "edges": [{"id": "e", "sourceNodeId": "fetch", "targetNodeId": "after"}],
        });
        apps.app.services.register_workflow("bench", definition).await.expect("workflow");
        let before = apps.totals().0;
        let mut ids = Vec::with_capacity(runs);
        for _ in 0..runs {
            let created = apps
                .api
                .services
                .create_run(&principal, &json!({"workflowId": workflow}), None, &respond)
                .await
                .expect("create");
            if let trellis_core::service::CreateOutcome::Created(run) = created {
                ids.push(run.run_id.clone());
            }
        }
        crate::drain(apps.app, sqs, queues).await;
        let after = apps.totals().0;
        let mut completed = 0;
        for id in &ids {
            let run = apps.api.services.get_run("bench", id).await.expect("run");
            completed += usize::from(run.status == trellis_core::RunStatus::Completed);
        }
        let per = |total: u64, earlier: u64| (total - earlier) as f64 / runs as f64;
        println!(
            "{:>9} {:>9.2} {:>9.2} {:>11.2} {:>11.2} {:>9.2} {:>9.2} {:>12.2} {:>10}",
            human(size),
            per(after.write_units, before.write_units),
            per(after.read_units, before.read_units),
            per(after.write_requests, before.write_requests),
            per(after.read_requests, before.read_requests),
            per(after.blob_puts, before.blob_puts),
            per(after.blob_gets, before.blob_gets),
            per(after.blob_bytes, before.blob_bytes) / 1_048_576.0,
            format!("{completed}/{runs}"),
        );
    }
    println!(
        "per run: every request of the scenario (both functions' stores) / runs; S3 figures from the store's meter"
    );
}

fn human(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}
