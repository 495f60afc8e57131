//! The embedded binary's dependency graph: `trellis` carries no AWS SDK crate (its node
//! registry registers no AWS kind; AWS activities live in the AWS crates only).

use std::process::Command;

#[test]
fn the_embedded_binary_has_no_aws_sdk_in_its_dependency_tree() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(["tree", "--offline", "-p", "trellis", "-e", "normal,build", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(tree.lines().any(|line| line.starts_with("trellis-activities")), "the tree lists the activities crate");
    let aws: Vec<&str> =
        tree.lines().filter(|line| line.starts_with("aws-sdk") || line.starts_with("aws-config")).collect();
    assert!(aws.is_empty(), "the embedded binary must not depend on the AWS SDK: {aws:?}");
}
