//! The git checkout a run is started in, as run.json's `context.git` records it: the commit and
//! branch from the checkout's files, and `dirty` from git's own `status`, asked once the
//! command's tree has ended (so that it takes no CPU or disk from the command): the checkout
//! as the command left it.
use std::path::Path;
use std::process::Command;

use tests::{git, montrace_bin, read_json, require_root, run_timeout, run_with_timeout};

/// `montrace run` of `script` in `checkout`: its run.json's `context.git`.
fn run_in(checkout: &Path, out: &Path, script: &str) -> serde_json::Value {
    let mut cmd = Command::new(montrace_bin());
    cmd.current_dir(checkout)
        .args(["run", "-q", "--no-report", "--out"])
        .arg(out)
        .args(["--", "sh", "-c", script]);
    let run = run_with_timeout(&mut cmd, run_timeout());
    assert_eq!(run.code(), 0, "{run:?}");
    let info = read_json(&out.join("run.json")).unwrap();
    assert_ne!(info["tracking_mode"], "polling", "{info}");
    info["context"]["git"].clone()
}

#[test]
fn a_runs_checkout_is_recorded_with_its_commit_branch_and_changes() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let checkout = tmp.path().join("project");
    std::fs::create_dir(&checkout).unwrap();
    git(&checkout, &["init", "-q", "-b", "trunk"]);
    std::fs::write(checkout.join("tracked.txt"), "one\n").unwrap();
    git(&checkout, &["add", "tracked.txt"]);
    git(&checkout, &["commit", "-qm", "first"]);
    let head = git(&checkout, &["rev-parse", "HEAD"]);
    // Clean.
    let clean = run_in(&checkout, &tmp.path().join("clean"), "true");
    assert_eq!(clean["commit"], head.as_str(), "{clean}");
    assert_eq!(clean["branch"], "trunk", "{clean}");
    assert_eq!(clean["dirty"], false, "{clean}");

    // A tracked file changed before the run.
    std::fs::write(checkout.join("tracked.txt"), "two\n").unwrap();
    let dirty = run_in(&checkout, &tmp.path().join("dirty"), "true");
    assert_eq!(dirty["dirty"], true, "{dirty}");

    // Clean again, and changed by the command itself: the checkout as the command left it.
    git(&checkout, &["checkout", "-q", "tracked.txt"]);
    let during = run_in(
        &checkout,
        &tmp.path().join("during"),
        "echo three > tracked.txt",
    );
    assert_eq!(during["dirty"], true, "{during}");
    assert_eq!(during["commit"], head.as_str(), "{during}");
}
