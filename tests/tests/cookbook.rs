//! Every query of the schema's "DuckDB cookbook" runs, as written, with real DuckDB on a real
//! run, and gives the right answers about a workload of known shape.
use std::collections::{BTreeMap, BTreeSet};

use tests::{duckdb_queries, known_workload, launch_montrace, Proc, QueryResult, MIB};

const SCHEMA_MD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schema.md");
const SECTION: &str = "## DuckDB cookbook";

/// One ```sql block of the cookbook: the `###` heading it is under, and its text.
#[derive(Debug)]
struct Recipe {
    heading: String,
    sql: String,
}

/// The ```sql blocks of the cookbook section, in order.
fn cookbook() -> Vec<Recipe> {
    let text = std::fs::read_to_string(SCHEMA_MD)
        .unwrap_or_else(|e| panic!("cannot read {SCHEMA_MD}: {e}"));
    let mut lines = text
        .lines()
        .skip_while(|line| line.trim_end() != SECTION)
        .skip(1)
        .take_while(|line| !line.starts_with("## "));
    let mut recipes = Vec::new();
    let mut heading = String::new();
    while let Some(line) = lines.next() {
        if let Some(h) = line.strip_prefix("### ") {
            heading = h.trim().to_string();
        } else if line.trim_end() == "```sql" {
            let sql: Vec<&str> = lines
                .by_ref()
                .take_while(|l| l.trim_end() != "```")
                .collect();
            recipes.push(Recipe {
                heading: heading.clone(),
                sql: sql.join("\n"),
            });
        }
    }
    assert!(
        !recipes.is_empty(),
        "{SCHEMA_MD} has no ```sql block under `{SECTION}`"
    );
    recipes
}

/// The answers under one heading, in the order of the doc; panics when the doc has none.
fn under<'a>(answers: &'a [(&Recipe, QueryResult)], heading: &str) -> Vec<&'a QueryResult> {
    let found: Vec<&QueryResult> = answers
        .iter()
        .filter(|(recipe, _)| recipe.heading == heading)
        .map(|(_, answer)| answer)
        .collect();
    assert!(
        !found.is_empty(),
        "the cookbook has no query under `### {heading}` (this test finds the queries by their \
         headings; it found {:?})",
        answers
            .iter()
            .map(|(r, _)| r.heading.as_str())
            .collect::<BTreeSet<_>>()
    );
    found
}

/// The first line of a query, to name it in messages.
fn first_line(sql: &str) -> &str {
    sql.lines().next().unwrap_or_default().trim()
}

/// The row whose `column` is `value`; panics unless there is exactly one.
fn row_with(answer: &QueryResult, column: &str, value: &str) -> usize {
    let rows: Vec<usize> = (0..answer.rows.len())
        .filter(|&i| answer.str(i, column) == Some(value))
        .collect();
    assert_eq!(
        rows.len(),
        1,
        "one row with {column} = {value}: {:#?}",
        answer.rows
    );
    rows[0]
}

#[test]
fn every_cookbook_query_answers_correctly() {
    let workload = known_workload();
    let holder = workload.holder.as_str();
    let run = launch_montrace(&["--interval", "100ms"], &workload.command())
        .ahead_of_the_machine()
        .run();
    run.assert_code(0);
    run.assert_nothing_lost();
    let processes = run.processes();
    assert_eq!(
        processes.len(),
        11,
        "sh, 2 montrace mark, 3 holders, 5 /bin/true: {processes:#?}"
    );
    let montrace = processes
        .iter()
        .find(|p| p.comm == "montrace")
        .and_then(|p| p.filename.clone())
        .expect("a `montrace mark` process");
    let root = run.root(&processes);
    let samples = run.samples();

    let recipes = cookbook();
    let dir = run.dir.display().to_string();
    let mut queries: Vec<String> = recipes
        .iter()
        .map(|recipe| {
            let sql = recipe.sql.replace("'RUN/", &format!("'{dir}/"));
            assert!(
                !sql.contains("RUN/") && !sql.contains("'RUN'"),
                "a placeholder other than 'RUN/...' in\n{}",
                recipe.sql
            );
            sql
        })
        .collect();
    queries.push(format!(
        "SELECT epoch_ns(time) AS t FROM '{dir}/system.parquet' ORDER BY t"
    ));
    let mut results = duckdb_queries(&queries);
    let system = results.pop().unwrap().expect("reading system.parquet");
    let system_times: Vec<i64> = (0..system.rows.len())
        .map(|i| system.u64(i, "t").unwrap() as i64)
        .collect();
    let system_rows = system_times.len() as u64;
    // The GPU tables exist only when montrace monitored GPUs (schema.md): without a GPU, their
    // recipes must fail for want of those files, and nothing else. With one, they must run;
    // this workload holds no GPU memory, so some may answer with no rows.
    let json = run.run_json();
    let gpu_monitored = json["gpu"]["status"] == "monitored";
    let reads_gpu_tables = |sql: &str| sql.contains("'RUN/gpu") || sql.contains("RUN/**/gpu");
    let mut failed = Vec::new();
    let mut answers = Vec::new();
    let mut gpu_recipes = Vec::new();
    for (recipe, result) in recipes.iter().zip(results) {
        let label = format!("### {} ({})", recipe.heading, first_line(&recipe.sql));
        if reads_gpu_tables(&recipe.sql) {
            match (gpu_monitored, result) {
                (false, Err(e)) if e.contains("No files found") && e.contains("/gpu") => {}
                (false, other) => failed.push(format!(
                    "{label}: without GPU tables this should fail for want of them, not give \
                     {other:?}\n{}",
                    recipe.sql
                )),
                (true, Ok(_)) => {}
                (true, Err(e)) => failed.push(format!("{label}: {e}\n{}", recipe.sql)),
            }
            gpu_recipes.push(label);
            continue;
        }
        match result {
            Ok(answer) if answer.rows.is_empty() => {
                failed.push(format!("{label}: no rows\n{}", recipe.sql))
            }
            Ok(answer) => answers.push((recipe, answer)),
            Err(e) => failed.push(format!("{label}: {e}\n{}", recipe.sql)),
        }
    }
    assert!(
        failed.is_empty(),
        "cookbook queries that fail or return nothing on a real run:\n\n{}\n\n{run:?}",
        failed.join("\n\n")
    );
    eprintln!(
        "{} cookbook queries ran and answered: {:?}",
        answers.len(),
        answers.iter().map(|(r, _)| &r.heading).collect::<Vec<_>>()
    );
    if !gpu_recipes.is_empty() {
        eprintln!(
            "NOTE: {} GPU recipes {} (run.json gpu.status: {}): {gpu_recipes:?}",
            gpu_recipes.len(),
            if gpu_monitored {
                "ran, on a workload that uses no GPU: their figures are not checked"
            } else {
                "failed as they should without GPU tables: their figures are not checked"
            },
            json["gpu"]["status"]
        );
    }

    // Top processes by CPU: the three holders (100 ms of CPU each) first, then the others but
    // the one that used the least; the figures are the processes' exit figures.
    let top = under(&answers, "Top processes by CPU")[0];
    let mut by_cpu: Vec<&Proc> = processes.iter().collect();
    by_cpu.sort_by_key(|p| std::cmp::Reverse(p.cpu_ns()));
    let pids: Vec<u64> = (0..top.rows.len())
        .map(|i| top.u64(i, "pid").unwrap())
        .collect();
    assert_eq!(
        pids,
        by_cpu[..10]
            .iter()
            .map(|p| u64::from(p.pid))
            .collect::<Vec<_>>(),
        "LIMIT 10 of the 11 processes, most CPU first: {:#?}",
        top.rows
    );
    assert!(pids.contains(&u64::from(root.pid)), "{:#?}", top.rows);
    for i in 0..3 {
        assert_eq!(top.str(i, "filename"), Some(holder), "{:#?}", top.rows);
        // Guarantee: a holder burns until its own CPU clock says 100 ms.
        assert!(top.f64(i, "cpu_s").unwrap() >= 0.1, "{:#?}", top.rows);
        assert!(
            top.f64(i, "peak_rss_mib").unwrap() >= 20.0,
            "{:#?}",
            top.rows
        );
    }
    for (i, row) in by_cpu[..10].iter().enumerate() {
        let cpu_s = top.f64(i, "cpu_s").unwrap();
        assert!(
            (cpu_s - row.cpu_ns() as f64 / 1e9).abs() < 1e-9,
            "row {i} says {cpu_s} s, processes.parquet {row:?}"
        );
    }

    // Memory of the whole tree over time: the sums per sweep, exactly; the three holders'
    // 20 MiB at once; the peaks as run.json has them.
    let memory = under(&answers, "Memory of the whole tree over time");
    assert_eq!(memory.len(), 2, "the tree over time, and its peaks");
    let (over_time, peaks) = (memory[0], memory[1]);
    // Per sweep: [processes, RSS, USS, PSS].
    let mut sweeps: BTreeMap<i64, [u64; 4]> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.source == "procfs") {
        // DuckDB reads the timestamp, in microseconds; the harness the exact `time_ns`.
        let sweep = sweeps.entry(s.time.div_euclid(1_000) * 1_000).or_default();
        sweep[0] += 1;
        sweep[1] += s.rss_bytes.unwrap();
        sweep[2] += s.uss_bytes.unwrap_or(0);
        sweep[3] += s.pss_bytes.unwrap_or(0);
    }
    let got: BTreeMap<i64, [u64; 4]> = (0..over_time.rows.len())
        .map(|i| {
            let time = over_time.get(i, "time").as_i64().expect("time as epoch_ns");
            let figures = ["processes", "rss_bytes", "uss_bytes", "pss_bytes"]
                .map(|c| over_time.u64(i, c).unwrap_or(0));
            (time, figures)
        })
        .collect();
    assert_eq!(got, sweeps, "the per-sweep sums of samples.parquet");
    let max_of = |k: usize| sweeps.values().map(|s| s[k]).max().unwrap();
    let (max_rss, max_uss, max_pss) = (max_of(1), max_of(2), max_of(3));
    eprintln!(
        "tree peaks: RSS {:.1} MiB, USS {:.1} MiB, PSS {:.1} MiB",
        max_rss as f64 / MIB as f64,
        max_uss as f64 / MIB as f64,
        max_pss as f64 / MIB as f64
    );
    // The three holders start together, burn 100 ms of CPU each on the machine's CPUs (ahead
    // of other work) and then hold 20 MiB for 500 ms (never less): their holds overlap for most
    // of those 500 ms, in which sweeps come every 100 ms, late on a busy machine, never skipped.
    assert!(
        max_uss >= 60 * MIB && max_rss >= 60 * MIB,
        "three holders had 20 MiB each at once: {:#?}",
        over_time.rows
    );
    for (k, column) in [(1, "rss"), (2, "uss"), (3, "pss")] {
        let max = max_of(k);
        assert_eq!(peaks.u64(0, &format!("peak_{column}_bytes")), Some(max));
        // No process shares another's address space here (shells fork, then exec): the sums
        // over address spaces are the plain sums. RSS is the run cgroup's own figure.
        if column != "rss" {
            assert_eq!(
                json["tree_memory_peaks"][format!("{column}_bytes")],
                max,
                "run.json's peak: {json}"
            );
        }
        let at = peaks
            .get(0, &format!("peak_{column}_time"))
            .as_i64()
            .unwrap();
        assert_eq!(
            sweeps[&at][k], max,
            "peak_{column}_time is a sweep at the peak"
        );
    }

    // The tree's memory, each image once: per sweep from system.parquet, whose largest values
    // are run.json's peaks; RSS from the run cgroup (these tests run as root).
    let once = under(&answers, "The tree's memory, each memory image once")[0];
    assert_eq!(json["tree_memory_peaks"]["source"], "cgroup", "{json}");
    for column in ["rss", "uss", "pss"] {
        let largest = (0..once.rows.len())
            .filter_map(|i| once.u64(i, &format!("tree_{column}_bytes")))
            .max();
        assert_eq!(
            json["tree_memory_peaks"][format!("{column}_bytes")].as_u64(),
            largest,
            "run.json's {column} peak is the largest of system.parquet's: {json}"
        );
    }
    let rss_peak = json["tree_memory_peaks"]["rss_bytes"].as_u64().unwrap();
    assert!(
        rss_peak >= 60 * MIB,
        "three holders had 20 MiB each at once: {json}"
    );

    // Per command: one row per program, with its instances and their memory.
    let per_command = under(&answers, "Per command")[0];
    assert_eq!(
        per_command.rows.len(),
        4,
        "sh, montrace, holder, true: {:#?}",
        per_command.rows
    );
    assert_eq!(
        per_command.str(0, "filename"),
        Some(holder),
        "most CPU first"
    );
    let h = row_with(per_command, "filename", holder);
    let t = row_with(per_command, "filename", "/bin/true");
    let sh = row_with(per_command, "filename", root.filename.as_deref().unwrap());
    assert_eq!(per_command.u64(h, "instances"), Some(3));
    assert_eq!(per_command.u64(t, "instances"), Some(5));
    assert_eq!(per_command.u64(sh, "instances"), Some(1));
    let m = row_with(per_command, "filename", &montrace);
    assert_eq!(per_command.u64(m, "instances"), Some(2));
    for column in ["max_instance_peak_uss_bytes", "avg_instance_peak_uss_bytes"] {
        let value = per_command.f64(h, column).unwrap();
        assert!(
            value >= (20 * MIB) as f64,
            "each holder has 20 MiB of its own, {column} = {value}"
        );
    }
    for column in [
        "peak_total_uss_bytes",
        "peak_total_rss_bytes",
        "peak_total_pss_bytes",
    ] {
        let value = per_command.f64(h, column).unwrap();
        assert!(
            value >= (60 * MIB) as f64,
            "the three holders had 60 MiB together, {column} = {value}"
        );
    }
    let holders_cpu: u64 = processes
        .iter()
        .filter(|p| p.has_filename(holder))
        .map(|p| p.cpu_ns())
        .sum();
    let cpu_s =
        per_command.f64(h, "cpu_user_s").unwrap() + per_command.f64(h, "cpu_system_s").unwrap();
    assert!(
        (cpu_s - holders_cpu as f64 / 1e9).abs() < 1e-6,
        "the holders' CPU: {cpu_s} s in the table, {holders_cpu} ns in processes.parquet"
    );
    // Guarantee: each holder sleeps its usleep(500 ms), which never returns early.
    assert!(per_command.f64(h, "duration_s").unwrap() >= 0.5);
    eprintln!("per command: {:?}", per_command.rows);

    // Samples next to their process: after a clean end every sample has its process.
    let joined = under(&answers, "Samples next to their process")[0];
    assert_eq!(
        joined.rows.len(),
        samples.len(),
        "every row of samples.parquet has its process"
    );
    for i in 0..joined.rows.len() {
        let pid = joined.u64(i, "pid").unwrap() as u32;
        let process = processes.iter().find(|p| p.pid == pid).unwrap();
        assert_eq!(
            joined.str(i, "filename"),
            process.filename.as_deref(),
            "row {i}: {:?}",
            joined.rows[i]
        );
    }

    // The machine over time: one row per sweep.
    let machine = under(&answers, "The machine over time")[0];
    assert_eq!(machine.rows.len() as u64, system_rows);
    // Every sweep has its system row, at its time. A sweep can find no process of the tree only
    // at the very end: the last process reaped, its exit event not in yet (it is sent at the
    // dying task's last context switch, which can come after its parent reaped it).
    for time in sweeps.keys() {
        assert!(
            system_times.contains(time),
            "no system row for the sweep at {time}: {system_times:?}"
        );
    }
    let without_processes: Vec<&i64> = system_times
        .iter()
        .filter(|t| !sweeps.contains_key(t))
        .collect();
    assert!(
        without_processes.len() <= 1
            && without_processes
                .iter()
                .all(|&&t| t > *sweeps.keys().last().unwrap()),
        "sweeps that found no process, other than one after the last process: \
         {without_processes:?}, sweeps {:?}",
        sweeps.keys().collect::<Vec<_>>()
    );
    for i in 0..machine.rows.len() {
        if let Some(busy) = machine.f64(i, "cpu_busy_percent") {
            assert!(
                (-1e-9..=100.0 + 1e-9).contains(&busy),
                "{:?}",
                machine.rows[i]
            );
        }
        assert!(machine.f64(i, "mem_used_gib").unwrap() > 0.0);
    }

    // The process tree: everything is the shell's child.
    let tree = under(&answers, "The process tree");
    assert_eq!(tree.len(), 2, "the parent join, and the indented tree");
    let (pairs, indented) = (tree[0], tree[1]);
    assert_eq!(pairs.rows.len(), 11);
    assert_eq!(pairs.u64(0, "pid"), Some(u64::from(root.pid)));
    assert!(pairs.get(0, "parent_pid").is_null());
    for i in 1..11 {
        assert_eq!(
            pairs.u64(i, "parent_pid"),
            Some(u64::from(root.pid)),
            "{:?}",
            pairs.rows[i]
        );
        assert_eq!(
            pairs.str(i, "parent_comm"),
            Some("sh"),
            "{:?}",
            pairs.rows[i]
        );
    }
    let lines: Vec<&str> = (0..indented.rows.len())
        .map(|i| indented.str(i, "process").unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            "sh",
            "  montrace",
            "  holder",
            "  holder",
            "  holder",
            "  montrace",
            "  true",
            "  true",
            "  true",
            "  true",
            "  true"
        ]
    );

    // Memory of the tree during each phase: `holders`, while the three held 20 MiB each.
    let phases = under(&answers, "Memory of the tree during each phase")[0];
    assert_eq!(phases.rows.len(), 1, "one phase: {:#?}", phases.rows);
    assert_eq!(phases.str(0, "label"), Some("holders"));
    let seconds = phases.f64(0, "seconds").unwrap();
    let sweeps_in = phases.u64(0, "sweeps").unwrap();
    eprintln!(
        "phase `holders`: {seconds:.3} s, {sweeps_in} sweeps, {:?}",
        phases.rows[0]
    );
    // The phase's length and sweeps are those of marks.parquet and samples.parquet exactly;
    // at least 0.5 s, as the holders wait for their usleep(500 ms), which never returns early.
    // Not "under 5 s": how long `montrace mark` takes to start is the machine's.
    let marks = run.marks();
    let (begin, end) = match &marks[..] {
        [b, e] if b.kind == "begin" && e.kind == "end" => (b.time, e.time),
        _ => panic!("one begin and one end: {marks:?}"),
    };
    let sweeps_between: BTreeSet<i64> = run
        .samples()
        .iter()
        .filter(|s| s.source == "procfs" && (begin..=end).contains(&s.time))
        .map(|s| s.time)
        .collect();
    assert!(
        seconds >= 0.5 && (seconds - (end - begin) as f64 / 1e9).abs() < 2e-6,
        "the holders held their memory 500 ms: {seconds} s, the marks {begin} to {end}"
    );
    assert_eq!(sweeps_in, sweeps_between.len() as u64, "{:#?}", phases.rows);
    // The phase holds the holders' 100 ms of CPU (three on the machine's CPUs) and their 500 ms
    // of sleep, swept every 100 ms: about 6 sweeps. A busy machine delays a sweep, never skips
    // one; 4 need montrace (ahead of the machine) on a CPU 4 times in 0.6 s.
    assert!(
        sweeps_in >= 4,
        "a sweep every 100 ms: {sweeps_in} in the phase"
    );
    for column in ["peak_rss_bytes", "peak_pss_bytes"] {
        let peak = phases.u64(0, column).unwrap();
        assert!(
            peak >= 60 * MIB,
            "three holders had 20 MiB each at once: {column} {peak}"
        );
    }

    // Processes started per second, with DuckDB's time functions on the timestamp columns: every
    // process is in one bucket, and each bucket's wall time is its processes' summed.
    let per_second = under(&answers, "Processes started per second")[0];
    let started: u64 = (0..per_second.rows.len())
        .map(|i| per_second.u64(i, "started").unwrap())
        .sum();
    assert_eq!(started, processes.len() as u64, "{per_second:?}");
    let wall_ms: f64 = (0..per_second.rows.len())
        .filter_map(|i| per_second.f64(i, "wall_ms"))
        .sum();
    let expected_ms: f64 = processes
        .iter()
        .filter_map(|p| {
            p.end_time
                .map(|end| (end.div_euclid(1_000_000) - p.start_time.div_euclid(1_000_000)) as f64)
        })
        .sum();
    // DuckDB's epoch_ms rounds to the nearest millisecond: within 1 ms per process.
    assert!(
        (wall_ms - expected_ms).abs() <= processes.len() as f64,
        "{wall_ms} ms against {expected_ms} ms from processes.parquet: {per_second:?}"
    );
    // The exact twins: the wall times to the nanosecond.
    let wall_ns: i64 = (0..per_second.rows.len())
        .filter_map(|i| per_second.get(i, "wall_ns").as_i64())
        .sum();
    let expected_ns: i64 = processes
        .iter()
        .filter_map(|p| p.end_time.map(|end| end - p.start_time))
        .sum();
    assert_eq!(wall_ns, expected_ns, "{per_second:?}");

    // Schema version.
    let version = under(&answers, "Schema version")[0];
    assert_eq!(version.str(0, "schema_version"), Some("3"));
}

/// The ```sql blocks of `doc` (a path under docs/).
fn sql_blocks(doc: &str) -> Vec<String> {
    let path = format!("{}/../{doc}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() == "```sql" {
            let sql: Vec<&str> = lines
                .by_ref()
                .take_while(|l| l.trim_end() != "```")
                .collect();
            blocks.push(sql.join("\n"));
        }
    }
    blocks
}

/// The queries of docs/marks.md and README (its `duckdb -c "..."` line) run as written on a real
/// run and answer about the known workload: the `holders` phase sent by `montrace mark`, and
/// the programs of the tree.
#[test]
fn the_queries_of_marks_md_and_the_readme_answer_correctly() {
    let workload = known_workload();
    let run = launch_montrace(&["--interval", "100ms"], &workload.command())
        .ahead_of_the_machine()
        .run();
    run.assert_code(0);
    let dir = run.dir.display().to_string();
    let marks = sql_blocks("docs/marks.md");
    assert_eq!(marks.len(), 1, "{marks:?}");
    let readme =
        std::fs::read_to_string(format!("{}/../README.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let one_liner = readme
        .lines()
        .find_map(|l| l.trim().strip_prefix("duckdb -c \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("README's duckdb -c example");
    let queries = vec![
        marks[0].replace("'RUN/", &format!("'{dir}/")),
        // Over all runs under montrace-runs/: here the one run.
        one_liner.replace("'montrace-runs/*/", &format!("'{dir}/")),
    ];
    let mut answers = duckdb_queries(&queries).into_iter();
    let phases = answers.next().unwrap().expect("marks.md's query");
    assert_eq!(phases.rows.len(), 1, "{phases:?}");
    assert_eq!(phases.str(0, "label"), Some("holders"));
    // The phase's length from the marks themselves, at least the holders' usleep(500 ms),
    // which never returns early. Not "under 10 s": how long `montrace mark` takes to start is
    // the machine's.
    let seconds = phases.f64(0, "seconds").unwrap();
    let marks_read = run.marks();
    let length = (marks_read[1].time - marks_read[0].time) as f64 / 1e9;
    assert!(
        seconds >= 0.5 && (seconds - length).abs() < 2e-6,
        "{phases:?} {marks_read:?}"
    );
    let programs = answers.next().unwrap().expect("README's query");
    let files: BTreeSet<String> = (0..programs.rows.len())
        .filter_map(|i| programs.str(i, "filename").map(String::from))
        .collect();
    assert!(files.contains("/bin/true"), "{programs:?}");
    assert!(files.contains(workload.holder.as_str()), "{programs:?}");
    let n: u64 = (0..programs.rows.len())
        .map(|i| programs.u64(i, "n").unwrap())
        .sum();
    assert_eq!(n, run.processes().len() as u64, "{programs:?}");
}
