//! The kill -9 fault campaign at CI size: 3 SIGKILLs of a real `trellis serve` under a
//! closed-loop load of 300 keyed creates; every accepted run must finish with a well-formed
//! log, none lost, none duplicated. The full-size campaign is the `trellis-campaign` bench
//! command (see `trellis_testkit::campaign`).

use std::time::Duration;

use trellis_testkit::campaign::{run, CampaignConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_kills_under_load_lose_and_duplicate_nothing() {
    let data = tempfile::tempdir().unwrap();
    let config = CampaignConfig {
        trellis: env!("CARGO_BIN_EXE_trellis").into(),
        data_dir: data.path().to_path_buf(),
        kills: 3,
        runs: 300,
        clients: 8,
        patience: Duration::from_secs(45),
    };
    let report = run(&config).await;
    eprintln!("{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.kills, 3, "{report}");
    assert_eq!(report.accepted, 300, "{report}");
    assert_eq!(report.verified, 300, "{report}");
}
