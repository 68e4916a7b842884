//! No-eBPF mode: a real `make -j2` build run by an unprivileged user is followed by polling
//! /proc; the same build as root, with eBPF, records at least as many processes.
use std::{os::unix::fs::PermissionsExt as _, path::Path};

use tests::{montrace_command, read_json, require_root, run_with_timeout, TIMEOUT};

/// A small C project: 8 sources, each compiled by its own `cc` (cc1, as, ...), then linked.
fn write_project(dir: &Path) {
    let mut objects = Vec::new();
    for i in 0..8 {
        std::fs::write(
            dir.join(format!("f{i}.c")),
            format!("int f{i}(int x) {{ int s = 0; for (int k = 0; k < x; k++) s += k * {i}; return s; }}\n"),
        )
        .unwrap();
        objects.push(format!("f{i}.o"));
    }
    let calls: String = (0..8).map(|i| format!("f{i}(3)+")).collect();
    let decls: String = (0..8).map(|i| format!("int f{i}(int);")).collect();
    std::fs::write(
        dir.join("main.c"),
        format!("{decls}\nint main(void) {{ return ({calls}0) == -1; }}\n"),
    )
    .unwrap();
    objects.push("main.o".into());
    std::fs::write(
        dir.join("Makefile"),
        format!(
            "app: {objs}\n\tcc -o app {objs}\n%.o: %.c\n\tcc -O1 -c $< -o $@\nclean:\n\trm -f app *.o\n",
            objs = objects.join(" ")
        ),
    )
    .unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
}

fn build(project: &Path, out: &Path, as_nobody: bool) -> serde_json::Value {
    // Polling finds processes at each sweep: at the default 200 ms, a build of about 200 ms
    // (this one, here) is seen at its start and perhaps once more, and whether a cc was alive
    // then was chance (only make was seen in one of three full test runs here). At 20 ms every
    // step of it is there at some sweep.
    let args = ["--no-report", "-q", "--interval", "20ms"];
    let make = ["make", "-j2", "-C"];
    let mut cmd = if as_nobody {
        tests::montrace_command_as_nobody(out, &args, &make)
    } else {
        montrace_command(out, &args, &make)
    };
    cmd.arg(project);
    let finished = run_with_timeout(&mut cmd, TIMEOUT);
    assert_eq!(finished.code(), 0, "{finished:?}");
    assert!(
        project.join("app").exists(),
        "the build produced its program"
    );
    read_json(&out.join("run.json")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn unprivileged_build_is_followed_by_polling_and_ebpf_sees_at_least_as_much() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    write_project(&project);

    let polled = build(&project, &tmp.path().join("polled"), true);
    assert_eq!(polled["tracking_mode"], "polling", "{polled}");
    let polled_processes = polled["processes_started"].as_u64().unwrap();
    // make itself and at least the link step's cc were seen. make always has a job running
    // from its first fork to its last wait, and a busy machine slows the build as much as the
    // sweeps: a sweep in the build's life finds one.
    assert!(polled_processes >= 2, "{polled}");
    // No critical path or parallelism that polling could not see.
    assert!(polled["time"].is_null(), "{polled}");

    let clean = run_with_timeout(
        std::process::Command::new("make")
            .arg("-C")
            .arg(&project)
            .arg("clean"),
        TIMEOUT,
    );
    assert_eq!(clean.code(), 0, "{clean:?}");

    let traced = build(&project, &tmp.path().join("traced"), false);
    assert_eq!(traced["tracking_mode"], "tp_btf", "{traced}");
    let traced_processes = traced["processes_started"].as_u64().unwrap();
    // make + 9 compiler drivers + their cc1/as + the link (collect2, ld): far more than polling
    // at 200 ms can see, and never fewer.
    assert!(
        traced_processes >= polled_processes && traced_processes >= 20,
        "eBPF {traced_processes} vs polling {polled_processes}: {traced}"
    );
    assert_eq!(traced["lost_events"]["ringbuf_full"], 0, "{traced}");
    assert!(
        traced["time"]["critical_path_s"].as_f64().unwrap() > 0.0,
        "{traced}"
    );
}
