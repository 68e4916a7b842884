//! `--limit`: montrace stops the tree when it crosses a limit, exits 124 (as timeout(1) does)
//! and records the breach.
use std::collections::BTreeMap;

use tests::{compile_c, launch_montrace, rfc3339_ns, MIB};

const MEMORY_HOG: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Takes and touches 10 MiB every 20 ms, up to 1 GiB; then holds it for 5 s. */
int main(void) {
    size_t chunk = 10u << 20, total = 0;
    while (total + chunk <= (1u << 30)) {
        char *p = malloc(chunk);
        if (!p) return 1;
        memset(p, 1, chunk);
        total += chunk;
        usleep(20000);
    }
    sleep(5);
    return 0;
}
"#;

#[test]
fn memory_hog_is_stopped_by_rss_limit() {
    let program = compile_c("memory_hog", MEMORY_HOG);
    let run = launch_montrace(
        &["--interval", "50ms", "--limit", "rss=100MiB"],
        &[program.as_str()],
    )
    .ahead_of_the_machine()
    .run();
    run.assert_code(124);
    for file in [
        "processes.parquet",
        "events.parquet",
        "samples.parquet",
        "system.parquet",
        "run.json",
        "summary.json",
    ] {
        assert!(
            run.dir.join(file).is_file(),
            "the run lacks {file}: {run:?}"
        );
    }
    let json = run.run_json();
    let summary = run.summary_json();
    let breach = &json["limit_breach"];
    assert_eq!(summary["limit_breach"], *breach, "{summary}");
    assert_eq!(json["exit_status"], 124, "{json}");
    assert_eq!(summary["exit_status"], 124, "{summary}");
    assert_eq!(breach["limit"], "rss", "{json}");
    assert_eq!(
        breach["threshold"].as_f64(),
        Some((100 * MIB) as f64),
        "{json}"
    );
    let value = breach["value"].as_f64().unwrap();
    eprintln!(
        "rss=100MiB: breach at {:.1} MiB, {:.3} s after the start",
        value / MIB as f64,
        breach["elapsed_s"].as_f64().unwrap()
    );
    // It grows by about 25 MiB per 50 ms sweep.
    assert!(
        value > (100 * MIB) as f64 && value < (160 * MIB) as f64,
        "the breach is seen at the first sweep over 100 MiB, yet its value is {:.1} MiB: {json}",
        value / MIB as f64
    );
    // The value is that sweep's figure for the tree (system.parquet), which the hog's own
    // sample matches within what it touched between the two reads.
    let sweeps: BTreeMap<i64, u64> = run
        .tree_rss()
        .into_iter()
        .filter_map(|(time, rss)| Some((time, rss?)))
        .collect();
    let (at, first_over) = sweeps
        .iter()
        .find(|(_, &rss)| rss > 100 * MIB)
        .unwrap_or_else(|| panic!("no sweep over 100 MiB: {sweeps:?}"));
    assert_eq!(value, *first_over as f64, "{sweeps:?}");
    let own = run
        .samples()
        .iter()
        .find(|s| s.time == *at && s.source != "exit")
        .and_then(|s| s.rss_bytes)
        .unwrap_or_else(|| panic!("the hog's sample of that sweep"));
    assert!(
        own.abs_diff(*first_over) < 20 * MIB,
        "the hog's RSS {own} against the tree's {first_over}"
    );

    // The hog was stopped with SIGTERM at once.
    let rows = run.processes();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let hog = &rows[0];
    assert_eq!(
        (hog.exit_code, hog.exit_signal),
        (None, Some(15)),
        "{hog:?}"
    );
    assert_eq!(json["exit_signal"], 15, "{json}");
    let breach_ns = rfc3339_ns(breach["time"].as_str().unwrap());
    let after_ns = hog.end_time.expect("end_time") - breach_ns;
    eprintln!(
        "the hog ended {:.1} ms after the breach",
        after_ns as f64 / 1e6
    );
    assert!(
        (0..1_000_000_000).contains(&after_ns),
        "the hog ended {:.3} s after the breach at {}: {hog:?}",
        after_ns as f64 / 1e9,
        breach["time"]
    );
    let peak = hog.peak_rss_bytes.unwrap();
    assert!(
        peak < 160 * MIB,
        "stopped at once, the hog never reached {:.1} MiB",
        peak as f64 / MIB as f64
    );
}
