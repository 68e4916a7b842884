//! The release artifact as a user installs it: `cargo xtask dist`'s tarball (a static montrace
//! with the eBPF programs inside, its completions and man pages) runs from an empty directory
//! with no toolchain on PATH, exactly; and docs/ci.md's GitHub and GitLab jobs run as written
//! against it — the GitHub job's shell steps in order, GitLab's script lines, in a private mount namespace whose /usr/local is an overlay, so that
//! the job's `tar -C /usr/local` and `setcap` land in the overlay and nothing outside the test is
//! touched. The one change to the job: `MONTRACE_URL` names the tarball built here (file://)
//! instead of the release's. `sudo` is a shim (`exec "$@"`): the test is root already, as a
//! GitHub runner's sudo is passwordless.
//!
//! `cargo xtask test` builds the tarball before the end-to-end tier (`$MONTRACE_DIST` names it).
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use tests::{git, read_json, require_root, run_with_timeout, write_c_project, TIMEOUT};

/// The tarball under test: `$MONTRACE_DIST`, else where `cargo xtask dist` writes it.
fn tarball() -> PathBuf {
    let path = match std::env::var_os("MONTRACE_DIST") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/dist/montrace-x86_64-linux-musl.tar.gz"),
    };
    assert!(
        path.is_file(),
        "the release tarball is missing at {}: build it with `cargo xtask dist` (or run \
         `cargo xtask test`, which does)",
        path.display()
    );
    path
}

/// A PATH with no Rust, LLVM or bpf-linker: only the system's directories.
const BARE_PATH: &str = "/usr/bin:/bin";

/// The tarball unpacked into a new temporary directory (every user may reach it).
fn unpacked() -> tempfile::TempDir {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let unpack = Command::new("tar")
        .arg("-xzf")
        .arg(tarball())
        .arg("-C")
        .arg(tmp.path())
        .args(["--strip-components=1"])
        .output()
        .unwrap();
    assert!(unpack.status.success(), "{unpack:?}");
    tmp
}

#[test]
fn the_tarball_runs_from_an_empty_directory_with_no_toolchain_exactly() {
    let tmp = unpacked();
    let bin = tmp.path().join("bin/montrace");
    // Static: the ELF names no program interpreter.
    let ldd = Command::new("ldd").arg(&bin).output().unwrap();
    let ldd_says =
        String::from_utf8_lossy(&ldd.stdout).to_string() + &String::from_utf8_lossy(&ldd.stderr);
    assert!(
        ldd_says.contains("not a dynamic executable") || ldd_says.contains("statically linked"),
        "{ldd_says}"
    );
    for page in [
        "montrace.1",
        "montrace-run.1",
        "montrace-bench.1",
        "montrace-compare.1",
    ] {
        let text = std::fs::read_to_string(tmp.path().join("share/man/man1").join(page)).unwrap();
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{page}: {text}"
        );
    }
    let bash = std::fs::read_to_string(
        tmp.path()
            .join("share/bash-completion/completions/montrace"),
    )
    .unwrap();
    assert!(bash.contains("montrace__subcmd__bench"), "{bash}");

    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let mut cmd = Command::new(&bin);
    cmd.current_dir(&empty)
        .env_clear()
        .env("PATH", BARE_PATH)
        .args(["run", "-o", "out", "--", "sh", "-c"])
        .arg("for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done; sleep 0.2");
    let run = run_with_timeout(&mut cmd, TIMEOUT);
    assert_eq!(run.code(), 0, "{run:?}");
    let json = read_json(&empty.join("out/run.json")).unwrap();
    assert_eq!(json["tracking_mode"], "tp_btf", "{json}");
    assert_eq!(json["processes_started"], 12, "{json}");
    let rows = tests::read_processes(&empty.join("out"));
    assert_eq!(rows.len(), 12);
    assert!(rows.iter().all(|p| p.peak_rss_bytes.is_some()), "{rows:?}");
}

/// The static binary allocates through jemalloc (musl's malloc made a short run about 5 ms
/// slower), which takes options from `_RJEM_MALLOC_CONF`: from anyone running the plain binary,
/// from nobody running the granted one (AT_SECURE: jemalloc reads its environment through
/// secure_getenv), so an ordinary user cannot steer the allocator of a binary that holds
/// capabilities.
#[test]
fn the_granted_tarball_binary_takes_no_allocator_options_from_its_user() {
    let tmp = unpacked();
    let plain = tmp.path().join("bin/montrace");
    let granted = tmp.path().join("bin/montrace-granted");
    std::fs::copy(&plain, &granted).unwrap();
    let setcap = Command::new("setcap")
        .arg("cap_bpf,cap_perfmon+ep")
        .arg(&granted)
        .output()
        .unwrap();
    assert!(setcap.status.success(), "{setcap:?}");
    let stats = |bin: &Path, user: bool| -> bool {
        let mut cmd = match user {
            true => {
                let mut c = Command::new("setpriv");
                c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(bin);
                c
            }
            false => Command::new(bin),
        };
        cmd.arg("--version")
            .env("_RJEM_MALLOC_CONF", "stats_print:true");
        let out = run_with_timeout(&mut cmd, TIMEOUT);
        assert_eq!(out.code(), 0, "{out:?}");
        assert!(out.stdout.starts_with("montrace "), "{out:?}");
        out.stderr.contains("Begin jemalloc statistics")
    };
    // The option is read (by root, and by the user from the plain copy)...
    assert!(stats(&plain, false), "root, the plain binary");
    assert!(stats(&plain, true), "the user, the plain binary");
    // ...but not by the granted copy run by the user.
    assert!(!stats(&granted, true), "the user, the granted binary");
}

/// A YAML block of docs/ci.md (the first after `section`), as JSON (python3's yaml: the YAML
/// a runner parses).
fn ci_yaml(section: &str) -> serde_json::Value {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ci.md"))
        .unwrap();
    let block = doc
        .split_once(section)
        .unwrap_or_else(|| panic!("docs/ci.md has a {section} section"))
        .1
        .split_once("```yaml\n")
        .expect("a ```yaml block in it")
        .1
        .split_once("```")
        .unwrap()
        .0;
    let json = tests::python(
        "parse docs/ci.md's YAML",
        "import json, sys, yaml; print(json.dumps(yaml.safe_load(sys.argv[1])))",
        &[block],
        &[],
    );
    serde_json::from_str(&json).unwrap()
}

/// A pull request: a git repository of a C project whose HEAD builds three times as many files
/// as its parent, the base. Returns (project, base commit, head commit).
fn pull_request(t: &Path) -> (PathBuf, String, String) {
    let project = t.join("work/project");
    write_c_project(&project, 2);
    git(&project, &["init", "-q"]);
    git(&project, &["add", "."]);
    git(&project, &["commit", "-qm", "base"]);
    let base = git(&project, &["rev-parse", "HEAD"]);
    write_c_project(&project, 6);
    git(&project, &["add", "."]);
    git(&project, &["commit", "-qm", "heavier"]);
    let head = git(&project, &["rev-parse", "HEAD"]);
    (project, base, head)
}

/// The tarball as the jobs' `MONTRACE_URL`.
fn tarball_url() -> String {
    format!("file://{}", tarball().display())
}

/// What a CI job did: its output, and the overlay's upper layer (what it wrote to /usr/local).
struct Job {
    run: tests::Finished,
    upper: PathBuf,
}

/// Runs `script` (bash) in `project` in a private mount namespace where /usr/local is an overlay
/// whose writes land in `t/upper`, with a bare PATH (and `sudo` as a shim) and `env`. Checks
/// that /usr/local itself was left as it was.
fn job_in_private_usr_local(t: &Path, project: &Path, script: &str, env: &[(&str, &Path)]) -> Job {
    let shims = t.join("shims");
    std::fs::create_dir_all(&shims).unwrap();
    std::fs::write(shims.join("sudo"), "#!/bin/sh\nexec \"$@\"\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(shims.join("sudo"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    let upper = t.join("upper");
    std::fs::create_dir_all(&upper).unwrap();
    std::fs::create_dir_all(t.join("overlay-work")).unwrap();
    let whole = format!(
        "set -e\nmount -t overlay overlay -o lowerdir=/usr/local,upperdir={upper},workdir={work} /usr/local\ncd {project}\n{script}",
        upper = upper.display(),
        work = t.join("overlay-work").display(),
        project = project.display(),
    );
    let before = std::fs::metadata("/usr/local/bin/montrace")
        .ok()
        .map(|m| m.len());
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "bash", "-c", &whole])
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/local/bin:{BARE_PATH}", shims.display()),
        )
        .env("HOME", t)
        .envs(env.iter().map(|(k, v)| (k, v.as_os_str())));
    let run = run_with_timeout(&mut cmd, TIMEOUT * 4);
    // Nothing outside the test: /usr/local is as it was.
    assert_eq!(
        std::fs::metadata("/usr/local/bin/montrace")
            .ok()
            .map(|m| m.len()),
        before
    );
    Job { run, upper }
}

/// What both jobs must have done: installed the static binary (granted where the job grants),
/// its man pages, and gated exactly, with only the verdict in `verdict_file`.
fn assert_gated_exactly(job: &Job, project: &Path, verdict_file: &Path, granted: bool) {
    let posted = std::fs::read_to_string(verdict_file).unwrap();
    assert!(posted.starts_with("### montrace bench: ❌ "), "{posted}");
    assert!(!posted.contains("cc -O2"), "only the verdict: {posted}");
    let verdict = read_json(&project.join("runs/verdict.json")).unwrap();
    assert_eq!(verdict["outcome"], "regressed", "{verdict}");
    let caps = file_capabilities(&job.upper.join("bin/montrace"));
    assert_eq!(
        caps,
        granted.then_some(CAP_BPF_AND_PERFMON),
        "the job's `montrace setcap`"
    );
    assert!(job.upper.join("share/man/man1/montrace-bench.1").is_file());
    // Every run of the gate was exact, from the installed copy.
    let rep = read_json(&project.join("runs/candidate/rep-001/run.json")).unwrap();
    assert_eq!(rep["tracking_mode"], "tp_btf", "{rep}");
}

#[test]
fn the_github_job_of_docs_ci_runs_as_written_against_the_tarball() {
    require_root();
    let workflow = ci_yaml("## GitHub Actions");
    let steps = workflow["jobs"]["gate"]["steps"]
        .as_array()
        .expect("the gate job's steps");
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (project, base, _) = pull_request(t);

    // Each `run:` step, with its env, as a script; the driver runs them in order like a runner,
    // which stops at the first step that fails.
    let mut driver = String::new();
    let mut ran = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let Some(script) = step["run"].as_str() else {
            continue; // `uses:` steps (checkout, upload-artifact) are the runner's
        };
        let name = step["name"].as_str().unwrap_or("step").to_string();
        let file = t.join(format!("step-{i}.sh"));
        std::fs::write(&file, script).unwrap();
        let mut env = String::new();
        if let Some(vars) = step["env"].as_object() {
            for (k, v) in vars {
                let value = match k.as_str() {
                    "MONTRACE_URL" => tarball_url(),
                    _ => v
                        .as_str()
                        .unwrap()
                        .replace("${{ github.event.pull_request.base.sha }}", &base),
                };
                env.push_str(&format!("{k}='{value}' "));
            }
        }
        driver.push_str(&format!(
            "echo '::step {name}'; status=0; env {env} bash --noprofile --norc -eo pipefail {} || status=$?; echo \"::status {name} $status\"; [ $status = 0 ] || exit 0\n",
            file.display()
        ));
        ran.push(name);
    }
    assert_eq!(ran, ["Install montrace", "Gate"], "{workflow}");
    let summary = t.join("step-summary.md");
    let job = job_in_private_usr_local(t, &project, &driver, &[("GITHUB_STEP_SUMMARY", &summary)]);
    let run = &job.run;
    assert_eq!(run.code(), 0, "{run:?}");
    assert!(
        run.stdout.contains("::status Install montrace 0"),
        "{run:?}"
    );
    // The candidate builds three times as much: the gate fails the job, with the verdict posted.
    assert!(run.stdout.contains("::status Gate 1"), "{run:?}");
    assert_gated_exactly(&job, &project, &summary, true);
}

/// GitLab's job: its `script:` lines in one shell that stops at the first failing line, as a
/// runner does, with the job's variables and GitLab's own for a merge request. The image's
/// `apt-get install` line is left out (the test machine has those packages from set-up, and
/// the test does not install packages on it); the target branch is on a remote `origin`.
#[test]
fn the_gitlab_job_of_docs_ci_runs_as_written_against_the_tarball() {
    require_root();
    let config = ci_yaml("## GitLab CI");
    let job = &config["resource-gate"];
    let lines: Vec<&str> = job["script"]
        .as_array()
        .expect("the job's script")
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(lines[0].starts_with("apt-get update"), "{lines:?}");
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (project, base, head) = pull_request(t);
    let origin = t.join("origin.git");
    git(t, &["init", "-q", "--bare", origin.to_str().unwrap()]);
    git(
        &project,
        &["remote", "add", "origin", origin.to_str().unwrap()],
    );
    git(
        &project,
        &["push", "-q", "origin", &format!("{base}:refs/heads/main")],
    );
    let mut script = String::from("set -eo pipefail\n");
    let url = tarball_url();
    for (k, v) in job["variables"].as_object().expect("the job's variables") {
        let value = if k == "MONTRACE_URL" {
            url.as_str()
        } else {
            v.as_str().unwrap()
        };
        script.push_str(&format!("export {k}='{value}'\n"));
    }
    script.push_str(&format!(
        "export CI_PIPELINE_SOURCE=merge_request_event CI_MERGE_REQUEST_TARGET_BRANCH_NAME=main CI_COMMIT_SHA={head}\n"
    ));
    for line in &lines[1..] {
        script.push_str(line);
        script.push('\n');
    }
    let job = job_in_private_usr_local(t, &project, &script, &[]);
    // The candidate builds three times as much: the job fails with the gate's status.
    assert_eq!(job.run.code(), 1, "{:?}", job.run);
    assert!(
        job.run.stdout.contains("### montrace bench: ❌ "),
        "{:?}",
        job.run
    );
    // The runner is root in a privileged container: no grant is needed, none is made.
    assert_gated_exactly(&job, &project, &project.join("verdict.md"), false);
}

/// CAP_PERFMON (38) and CAP_BPF (39): bits 6 and 7 of the permitted set's upper word.
const CAP_BPF_AND_PERFMON: u32 = (1 << (38 - 32)) | (1 << (39 - 32));

/// The upper word of a file's permitted capabilities, from its `security.capability` attribute
/// (struct vfs_cap_data: magic, then permitted/inheritable of the low word, then of the high
/// word); None without the attribute.
fn file_capabilities(path: &Path) -> Option<u32> {
    use std::os::unix::ffi::OsStrExt as _;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut buf = [0u8; 24];
    // SAFETY: both strings are NUL-terminated and buf is writable for its length.
    let n = unsafe {
        libc::getxattr(
            c_path.as_ptr(),
            c"security.capability".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    (n >= 20).then(|| u32::from_le_bytes(buf[12..16].try_into().unwrap()))
}
