//! Batch jobs on a real Slurm cluster (issue 34): munged, slurmctld and slurmd on 127.0.0.1
//! (tests::slurm), montrace's SPANK plugin and a node agent. An ordinary user's jobs, submitted
//! with sbatch, each task become an exact montrace run labelled with its job, without the user
//! doing anything.
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use tests::{read_json, read_processes, slurm::Cluster, users::TestUser, Proc};

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
    let [per_job, per_user] = cluster_doc_queries(&cluster.dataset);
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
fn cluster_doc_queries(dataset: &Path) -> [tests::QueryResult; 2] {
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
    assert_eq!(queries.len(), 2, "the SQL blocks of docs/cluster.md");
    let answers: Vec<tests::QueryResult> = tests::duckdb_queries(&queries)
        .into_iter()
        .zip(&queries)
        .map(|(answer, sql)| answer.unwrap_or_else(|e| panic!("{sql}\n{e}")))
        .collect();
    answers.try_into().unwrap()
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
    let [_, per_user] = cluster_doc_queries(&cluster.dataset);
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
