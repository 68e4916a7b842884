//! Batch jobs on a real Slurm cluster (issue 34): munged, slurmctld and slurmd on 127.0.0.1
//! (tests::slurm), montrace's SPANK plugin and a node agent. An ordinary user's jobs, submitted
//! with sbatch, each task become an exact montrace run labelled with its job, without the user
//! doing anything.
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use tests::{
    read_json, read_processes,
    slurm::{Cluster, Options},
    users::TestUser,
    Proc,
};

/// A finished task's run: run.json, and every process row with its exit figures.
fn exact_run(dir: &Path, user: &TestUser) -> (serde_json::Value, Vec<Proc>) {
    let info = read_json(&dir.join("run.json")).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(info["tracking_mode"], "polling", "{info}");
    let lost: u64 = info["lost_events"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(lost, 0, "{info}");
    assert_eq!(
        std::fs::metadata(dir.join("processes.parquet"))
            .unwrap()
            .uid(),
        user.uid,
        "the run is written as the job's user"
    );
    let rows = read_processes(dir);
    (info, rows)
}

fn slurm_of(info: &serde_json::Value) -> &serde_json::Value {
    &info["context"]["slurm"]
}

#[test]
fn every_task_of_an_array_and_of_each_step_is_an_exact_run_labelled_with_its_job() {
    let cluster = Cluster::start();
    let user = TestUser::create("slm");

    // A job array of 20: task K runs K /bin/true from its batch script.
    let script = "i=0; while [ $i -lt $SLURM_ARRAY_TASK_ID ]; do /bin/true; i=$((i+1)); done";
    let (array, done) = cluster.sbatch(
        &user,
        &[
            "--array=1-20",
            "-c1",
            "--mem=50M",
            "-t",
            "5",
            "-o",
            "/dev/null",
        ],
        script,
    );
    assert_eq!(done.code(), 0, "{done:?}\n{}", cluster.logs());
    // Each task is a job of its own (its own id), named in run.json with the array's id and
    // its index.
    let mut tasks = std::collections::BTreeMap::new();
    for job in std::fs::read_dir(cluster.jobs.join(&user.name)).unwrap() {
        let job = job.unwrap().path();
        let info = read_json(&job.join("batch.0/run.json")).unwrap();
        let index: u64 = slurm_of(&info)["array_task_id"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            std::fs::read_dir(&job).unwrap().count(),
            1,
            "{}",
            job.display()
        );
        assert!(
            tasks.insert(index, job.join("batch.0")).is_none(),
            "index {index} twice"
        );
    }
    assert_eq!(
        tasks.keys().copied().collect::<Vec<u64>>(),
        (1..=20).collect::<Vec<u64>>()
    );
    for (&k, dir) in &tasks {
        let (info, rows) = exact_run(dir, &user);
        // The batch script's shell and its K /bin/true, each once, each with its exit CPU.
        assert_eq!(rows.len() as u64, k + 1, "array task {k}: {rows:#?}");
        assert_eq!(info["processes_started"], k + 1, "{info}");
        let trues = rows.iter().filter(|r| r.has_filename("/bin/true")).count();
        assert_eq!(trues as u64, k, "{rows:#?}");
        assert!(rows.iter().all(|r| r.cpu_user_ns.is_some()), "{rows:#?}");
        let s = slurm_of(&info);
        assert_eq!(s["array_job_id"], array.to_string(), "{s}");
        assert_eq!(s["array_task_id"], k.to_string(), "{s}");
        assert_eq!(s["step_id"], "batch", "{s}");
        assert_eq!(s["user"], user.name.as_str(), "{s}");
        assert_eq!(s["partition"], "debug", "{s}");
        assert_eq!(s["cluster"], "montrace", "{s}");
        assert_eq!(s["requested_cpus"], 1, "{s}");
        assert_eq!(s["requested_memory_bytes"], 50u64 << 20, "{s}");
        assert_eq!(s["time_limit_s"], 300, "{s}");
    }

    // A job of three steps: three /bin/true; two tasks of two /bin/true each; one that leaves
    // a daemon behind, once it has exec'd (the shell's builtins wait for its comm: a shell that
    // ends between its child's fork and exec leaves an `sh` row, which failed this test once) (Slurm ends it with its step: the step takes no longer than without
    // montrace, and the daemon is recorded as alive at the end).
    let script = "srun -n1 sh -c 'for i in 1 2 3; do /bin/true; done'; \
                  srun -n2 sh -c 'for i in 1 2; do /bin/true; done'; \
                  srun -n1 sh -c 'sleep 300 & until read c </proc/$!/comm && [ $c = sleep ]; do :; done; echo left'";
    let started = std::time::Instant::now();
    let (job, done) = cluster.sbatch(
        &user,
        &["-n2", "-c1", "--mem=100M", "-o", "/dev/null"],
        script,
    );
    assert_eq!(done.code(), 0, "{done:?}\n{}", cluster.logs());
    // An upper bound, not a race: a step that waited for its daemon would take its 300 s.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(150),
        "the daemon's step waited for it: {:?}",
        started.elapsed()
    );
    let runs = cluster.runs_of(&user, &job.to_string());
    let names: Vec<&str> = runs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["0.0", "1.0", "1.1", "2.0", "batch.0"]);
    let count = |name: &str| {
        let dir = &runs.iter().find(|(n, _)| n == name).unwrap().1;
        exact_run(dir, &user)
    };
    let (info, rows) = count("0.0");
    assert_eq!(rows.len(), 4, "{rows:#?}");
    assert_eq!(slurm_of(&info)["step_id"], "0");
    for task in ["1.0", "1.1"] {
        let (info, rows) = count(task);
        assert_eq!(rows.len(), 3, "{task}: {rows:#?}");
        assert_eq!(slurm_of(&info)["step_id"], "1");
        assert_eq!(slurm_of(&info)["task_id"], &task[2..]);
    }
    let (info, rows) = count("2.0");
    let left: Vec<&Proc> = rows.iter().filter(|r| r.alive_at_end).collect();
    assert_eq!(rows.len(), 2, "the shell and the daemon it left: {rows:#?}");
    assert_eq!(left.len(), 1, "{rows:#?}");
    assert_eq!(left[0].comm, "sleep", "{rows:#?}");
    assert_eq!(info["totals"]["alive_at_end"], 1, "{info}");
    // The batch script: its shell and its three srun clients at least (srun may fork helpers).
    let (_, rows) = count("batch.0");
    let sruns = rows.iter().filter(|r| r.comm == "srun").count();
    assert!(sruns >= 3, "{rows:#?}");

    // The epilogs published every run: docs/cluster.md's queries, as written, answer per job
    // and per user.
    cluster.wait_for_published(20 + 5);
    let [per_job, per_user, _] = cluster_doc_queries(&cluster.dataset);
    assert_eq!(per_job.rows.len(), 21, "{per_job:#?}");
    for row in &per_job.rows {
        let col = |name: &str| &row[per_job.column(name)];
        assert_eq!(col("user"), user.name.as_str(), "{row:?}");
        assert_eq!(col("partition"), "debug", "{row:?}");
        let multi_step = col("job") == job.to_string().as_str();
        assert_eq!(col("runs"), if multi_step { 5 } else { 1 }, "{row:?}");
        assert_eq!(col("cpus_asked"), if multi_step { 2 } else { 1 }, "{row:?}");
        let mem = if multi_step { 100.0 } else { 50.0 }; // --mem is per node
        assert_eq!(col("mem_asked_mib").as_f64(), Some(mem), "{row:?}");
    }
    assert_eq!(per_user.rows.len(), 1, "{per_user:#?}");
    assert_eq!(
        per_user.rows[0][per_user.column("jobs")],
        21,
        "{per_user:#?}"
    );
}

/// docs/cluster.md's SQL blocks, as written but for the dataset's path, through DuckDB.
fn cluster_doc_queries(dataset: &Path) -> [tests::QueryResult; 3] {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cluster.md"))
        .unwrap();
    let queries: Vec<String> = doc
        .split("```sql\n")
        .skip(1)
        .map(|block| {
            let sql = block.split("```").next().unwrap();
            sql.replace("DATASET", &dataset.display().to_string())
        })
        .collect();
    assert_eq!(queries.len(), 3, "the SQL blocks of docs/cluster.md");
    let answers: Vec<tests::QueryResult> = tests::duckdb_queries(&queries)
        .into_iter()
        .zip(&queries)
        .map(|(answer, sql)| answer.unwrap_or_else(|e| panic!("{sql}\n{e}")))
        .collect();
    answers.try_into().unwrap()
}

/// Beside `sacct` (Slurm's accounting: slurmdbd on MariaDB, jobacct_gather polling at Slurm's
/// default 30 s): docs/cluster.md's query counts every process and each one's own peak, where
/// `MaxRSS` saw none of the 300 MiB; `TotalCPU` is the tree's CPU (a gzip of 400 MB is most of
/// it) plus montrace's own (this debug build's: its start, files and report, under 2 s).
#[test]
fn sacct_agrees_on_cpu_and_misses_the_peak_that_montrace_records() {
    let cluster = Cluster::start_with(Options {
        accounting: true,
        ..Options::default()
    });
    let user = TestUser::create("sac");
    let script = "for i in $(seq 200); do /bin/true; done; \
                  python3 -c 'b = bytearray(300 << 20)'; \
                  head -c 400000000 /dev/zero | gzip -c > /dev/null";
    let (job, done) = cluster.sbatch(&user, &["-c1", "--mem=1G", "-o", "/dev/null"], script);
    assert_eq!(done.code(), 0, "{done:?}\n{}", cluster.logs());
    let runs = cluster.runs_of(&user, &job.to_string());
    let (_, rows) = exact_run(&runs[0].1, &user);
    assert_eq!(
        rows.iter().filter(|p| p.has_filename("/bin/true")).count(),
        200
    );
    cluster.wait_for_published(1);
    let [_, _, beside] = cluster_doc_queries(&cluster.dataset);
    assert_eq!(beside.rows.len(), 1, "{beside:#?}");
    let col = |name: &str| &beside.rows[0][beside.column(name)];
    assert_eq!(col("job"), job.to_string().as_str(), "{beside:#?}");
    assert_eq!(
        col("processes").as_u64(),
        Some(rows.len() as u64),
        "{beside:#?}"
    );
    // Each /bin/true lives milliseconds: every one is in the dataset.
    assert!(
        col("lived_under_1s").as_u64().unwrap() >= 200,
        "{beside:#?}"
    );
    let cpu_s = col("cpu_s").as_f64().unwrap();
    let largest_mib = col("largest_process_mib").as_f64().unwrap();
    // The kernel's own high-water mark of the Python, at its exit.
    assert!(largest_mib >= 300.0, "{beside:#?}");

    let sacct = cluster.sacct(job, &["TotalCPU", "MaxRSS"]);
    let batch = sacct
        .iter()
        .find(|l| l["JobID"] == format!("{job}.batch"))
        .unwrap_or_else(|| panic!("{sacct:?}"));
    let total_cpu = slurm_duration_s(&batch["TotalCPU"]);
    let max_rss = slurm_kib(&batch["MaxRSS"]) * 1024;
    eprintln!(
        "job {job}: montrace {} processes, {cpu_s} s CPU, largest {largest_mib} MiB; \
         sacct TotalCPU {total_cpu} s, MaxRSS {} MiB",
        rows.len(),
        max_rss >> 20
    );
    // Both are the kernel's accounting of the tree's CPU (montrace's from each exit, sacct's from
    // the task's rusage, which holds every child it waited for); sacct's adds montrace's own (its
    // start, its files, its scontrol question). The tolerance is tests::assert_cpu_close's: when
    // each figure was taken, not how busy the machine was.
    assert!(
        cpu_s <= total_cpu * 1.02 + 0.02 && total_cpu - cpu_s < 2.0,
        "montrace {cpu_s} s, sacct {total_cpu} s: {sacct:?}"
    );
    // The job ended before jobacct_gather's second poll (30 s): the peak lived between polls.
    assert!(max_rss < 100 << 20, "MaxRSS {max_rss}: {sacct:?}");
}

/// sacct's `[D-][HH:]MM:SS[.mmm]`, in seconds.
fn slurm_duration_s(text: &str) -> f64 {
    let (days, clock) = text.split_once('-').unwrap_or(("0", text));
    let clock = clock
        .split(':')
        .fold(0.0, |acc, part| acc * 60.0 + part.parse::<f64>().unwrap());
    days.parse::<f64>().unwrap() * 86_400.0 + clock
}

/// sacct's memory figures (`1068K`, `12M`, `1.5G`; empty: none), in KiB.
fn slurm_kib(text: &str) -> u64 {
    let Some(unit) = text.chars().last() else {
        return 0;
    };
    let scale = match unit {
        'K' => 1.0,
        'M' => 1024.0,
        'G' => 1024.0 * 1024.0,
        _ => return text.parse().unwrap(),
    };
    (text[..text.len() - 1].parse::<f64>().unwrap() * scale) as u64
}

#[test]
fn sacct_figures_read_back() {
    assert_eq!(slurm_duration_s("00:01.583"), 1.583);
    assert_eq!(slurm_duration_s("01:02:03"), 3723.0);
    assert_eq!(slurm_duration_s("1-00:00:01"), 86_401.0);
    assert_eq!(slurm_kib("1068K"), 1068);
    assert_eq!(slurm_kib("12M"), 12 * 1024);
    assert_eq!(slurm_kib(""), 0);
}

#[test]
fn a_job_killed_by_its_memory_limit_and_one_that_cannot_be_recorded_both_run() {
    let cluster = Cluster::start();
    let user = TestUser::create("slk");

    // 200 MiB asked of a 60 MiB job: the kernel's OOM killer ends the allocator (cgroup).
    let grow = "python3 -c 'a = [bytearray(1 << 20) for _ in range(200)]; print(\"survived\")'";
    let (job, done) = cluster.sbatch(&user, &["-c1", "--mem=60M", "-o", "/dev/null"], grow);
    assert_ne!(done.code(), 0, "the job must fail: {done:?}");
    let runs = cluster.runs_of(&user, &job.to_string());
    let (info, rows) = exact_run(&runs[0].1, &user);
    let python = rows
        .iter()
        .find(|r| r.comm.starts_with("python"))
        .unwrap_or_else(|| panic!("{rows:#?}"));
    assert_eq!(python.exit_signal, Some(9), "{python:#?}");
    let peak = python.peak_rss_bytes.unwrap();
    // It grew to the limit (less what the cgroup's page cache and montrace itself took), not
    // to 200 MiB.
    assert!(peak > 30 << 20 && peak < 100 << 20, "peak {peak}");
    assert_eq!(slurm_of(&info)["requested_memory_bytes"], 60u64 << 20);
    // Published by its epilog: docs/cluster.md's per-user query counts it near its limit.
    cluster.wait_for_published(1);
    let [_, per_user, _] = cluster_doc_queries(&cluster.dataset);
    assert_eq!(per_user.rows.len(), 1, "{per_user:#?}");
    assert_eq!(
        per_user.rows[0][per_user.column("near_mem_limit")],
        1,
        "{per_user:#?}"
    );

    // Another user's directory where this user's part should be: the job runs, unrecorded,
    // and says why.
    let other = TestUser::create("slo");
    let squatted = cluster.jobs.join(&user.name);
    std::fs::remove_dir_all(&squatted).unwrap();
    std::fs::create_dir(&squatted).unwrap();
    std::os::unix::fs::chown(&squatted, Some(other.uid), Some(other.gid)).unwrap();
    let out = user.home.join("out.txt");
    let (_, done) = cluster.sbatch(
        &user,
        &["-c1", "-o", out.to_str().unwrap()],
        "echo the command ran",
    );
    assert_eq!(done.code(), 0, "{done:?}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("the command ran"), "{text}");
    assert!(text.contains("this task runs unrecorded"), "{text}");
    assert_eq!(std::fs::read_dir(&squatted).unwrap().count(), 0);

    // --montrace=off: the user's own opt-out.
    std::fs::remove_dir(&squatted).unwrap();
    let (job, done) = cluster.sbatch(&user, &["-c1", "--montrace=off", "-o", "/dev/null"], "true");
    assert_eq!(done.code(), 0, "{done:?}");
    assert!(
        !cluster.jobs.join(&user.name).join(job.to_string()).exists(),
        "an opted-out job was recorded"
    );
}

/// The cost per job (BENCHMARKS.md's Slurm section, `cargo xtask bench --only slurm`): N jobs
/// recorded by the plugin and N with `--montrace=off`, interleaved, on the same cluster. Each job
/// is a batch script of 20 `/bin/true` and one step (`srun -n1 /bin/true`), so two tasks. It
/// asserts that every recorded job gave its two exact runs, that no opted-out job was recorded,
/// and that the epilogs published every run; where `$MONTRACE_BENCH_OUT` names a file it writes
/// the raw measurements there as JSON. `$MONTRACE_BENCH_JOBS`: N (default 10).
#[test]
#[ignore = "a measurement: cargo xtask bench --only slurm"]
fn cost_per_job() {
    let jobs: usize = std::env::var("MONTRACE_BENCH_JOBS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let cluster = Cluster::start_with(tests::slurm::Options {
        time_epilog: true,
        ..Default::default()
    });
    let user = TestUser::create("slb");
    let agent_cpu = || agent_cpu_s(cluster.agent.pid());
    // The step's wall, from inside the job: nanoseconds around `srun`, into the job's output.
    let script = "i=0; while [ $i -lt 20 ]; do /bin/true; i=$((i+1)); done; \
                  t0=$(date +%s%N); srun -n1 /bin/true; t1=$(date +%s%N); echo step_ns=$((t1-t0))";
    let cpu_before = agent_cpu();
    let mut measured = [Vec::new(), Vec::new()];
    for i in 0..jobs * 2 {
        let on = i % 2 == 0;
        let out = user.home.join(format!("job-{i}.out"));
        let mut args = vec!["-c1", "--mem=50M", "-o", out.to_str().unwrap()];
        if !on {
            args.push("--montrace=off");
        }
        let submitted_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let (job, done) = cluster.sbatch(&user, &args, script);
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        assert_eq!(done.code(), 0, "{done:?}\n{text}\n{}", cluster.logs());
        let step_ns: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("step_ns="))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("job {job}'s output: {text:?}"));
        let dir = cluster.jobs.join(&user.name).join(job.to_string());
        if on {
            let runs = cluster.runs_of(&user, &job.to_string());
            let names: Vec<&str> = runs.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["0.0", "batch.0"], "job {job}");
            let (_, step) = exact_run(&runs[0].1, &user);
            assert_eq!(step.len(), 1, "{step:#?}");
            assert!(step[0].has_filename("/bin/true"), "{step:#?}");
            let (_, batch) = exact_run(&runs[1].1, &user);
            let trues = batch.iter().filter(|r| r.has_filename("/bin/true")).count();
            assert_eq!(trues, 20, "{batch:#?}");
        } else {
            assert!(!dir.exists(), "the opted-out job {job} was recorded");
        }
        measured[usize::from(!on)].push(serde_json::json!({
            "job": job,
            "submitted_ns": submitted_ns,
            "step_s": step_ns as f64 / 1e9,
            "run_dir_bytes": if on { Some(bytes_under(&dir)) } else { None },
        }));
    }
    // The recorded jobs, two tasks each.
    let runs = jobs * 2;
    cluster.wait_for_published(runs);
    let cpu_after = agent_cpu();
    // Every job's epilog ran (an opted-out job's too: it publishes nothing).
    // The job's wall as the node saw it end: from submission to its epilog's start (`sbatch
    // --wait` itself returns only at its next poll of the job's state, seconds later).
    let epilogs = cluster.epilog_times();
    for m in measured.iter_mut().flatten() {
        let job = m["job"].as_u64().unwrap() as u32;
        let epilog = epilogs
            .iter()
            .find(|e| e.job == job)
            .unwrap_or_else(|| panic!("no epilog for job {job}: {epilogs:?}"));
        let submitted = m["submitted_ns"].as_u64().unwrap();
        let wall = epilog.start_ns.checked_sub(submitted).unwrap() as f64 / 1e9;
        m["submit_to_end_s"] = wall.into();
    }
    let tables: serde_json::Map<String, serde_json::Value> = std::fs::read_dir(&cluster.dataset)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, bytes_under(&p).into())
        })
        .collect();
    assert!(tables.contains_key("runs"), "{tables:?}");
    let report = serde_json::json!({
        "jobs_per_way": jobs,
        "tasks_per_job": 2,
        "processes_per_job": 24,
        "runs_published": runs,
        "agent_cpu_s": cpu_after - cpu_before,
        "on": measured[0],
        "off": measured[1],
        "epilogs": epilogs.iter().map(|e| serde_json::json!({
            "job": e.job,
            "recorded": measured[0].iter().any(|m| m["job"] == e.job),
            "wall_s": e.wall_s,
            "user_s": e.user_s,
            "system_s": e.system_s,
        })).collect::<Vec<_>>(),
        "dataset_bytes": bytes_under(&cluster.dataset),
        "dataset_tables": tables,
    });
    if let Some(path) = std::env::var_os("MONTRACE_BENCH_OUT") {
        std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    }
}

/// utime + stime of a process, seconds (/proc/PID/stat).
fn agent_cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command's `(comm)`, which may hold spaces: state is the first.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

/// The bytes of every file under `dir` (their lengths, as `du -sb` counts them).
fn bytes_under(dir: &Path) -> u64 {
    tests::slurm::walk(dir)
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .sum()
}
