//! The report and the exports of a real run: report.html opens in headless Chromium without
//! errors and renders something, `montrace report` and `montrace export` write what they say.
//!
//! Chromium is Debian's `chromium` (installed by `cargo xtask setup`). These tests fail, rather
//! than skip, without it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tests::*;

const CHROMIUM: &str = "/usr/bin/chromium";
const WINDOW: (u32, u32) = (1280, 2000);

/// The known workload with its holders inside a `hold` phase, at 100 ms sweeps.
fn recorded_run() -> Run {
    let work = known_workload();
    let montrace = montrace_bin();
    let script = format!(
        "{m} mark --begin hold; for i in 1 2 3; do {h} & done; wait; {m} mark --end hold; \
         for i in 1 2 3 4 5; do /bin/true; done",
        m = montrace.display(),
        h = work.holder.as_str()
    );
    let run = run_montrace(&["--interval", "100ms"], &["sh", "-c", &script]);
    run.assert_code(0);
    run
}

fn chromium() -> Command {
    assert!(
        Path::new(CHROMIUM).is_file(),
        "{CHROMIUM} is missing: run `cargo xtask setup` (it installs Debian's chromium)"
    );
    let mut cmd = Command::new(CHROMIUM);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    ]);
    cmd
}

/// What Chromium made of one page.
struct Rendered {
    finished: Finished,
    png: Vec<u8>,
}

impl Rendered {
    /// Console messages of the page itself (uncaught exceptions and console.error/log land
    /// here as `CONSOLE` lines that name the page as their source); Chromium's own noise
    /// (D-Bus, GPU) is not about the page.
    fn page_console(&self, page: &Path) -> Vec<&str> {
        let url = format!("file://{}", page.display());
        self.finished
            .stderr
            .lines()
            .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught"))
            .filter(|l| l.contains(&url) || l.contains("Uncaught"))
            .collect()
    }
}

/// Screenshots `page` (a file) at [`WINDOW`] with a fresh profile.
fn screenshot(page: &Path) -> Rendered {
    screenshot_at(page, WINDOW)
}

/// Screenshots `page` at a window of `size` (width, height) with a fresh profile.
fn screenshot_at(page: &Path, size: (u32, u32)) -> Rendered {
    let tmp = tempfile::tempdir().expect("creating a temporary directory");
    let png = tmp.path().join("shot.png");
    let finished = run_with_timeout(
        chromium()
            .arg(format!(
                "--user-data-dir={}",
                tmp.path().join("profile").display()
            ))
            .arg(format!("--screenshot={}", png.display()))
            .arg(format!("--window-size={},{}", size.0, size.1))
            .arg(format!("file://{}", page.display())),
        Duration::from_secs(60),
    );
    assert_eq!(
        finished.status.code(),
        Some(0),
        "chromium failed on {}: {finished:?}",
        page.display()
    );
    let png = std::fs::read(&png)
        .unwrap_or_else(|e| panic!("no screenshot of {}: {e}; {finished:?}", page.display()));
    Rendered { finished, png }
}

/// The DOM of `page` after its scripts ran.
fn dump_dom(page: &Path) -> String {
    let tmp = tempfile::tempdir().expect("creating a temporary directory");
    let finished = run_with_timeout(
        chromium()
            .arg(format!(
                "--user-data-dir={}",
                tmp.path().join("profile").display()
            ))
            .arg("--dump-dom")
            .arg(format!("file://{}", page.display())),
        Duration::from_secs(60),
    );
    assert_eq!(finished.status.code(), Some(0), "{finished:?}");
    finished.stdout
}

/// Width and height from a PNG's IHDR chunk.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

#[test]
fn report_html_renders_in_headless_chromium_without_errors() {
    let run = recorded_run();
    let page = run.dir.join("report.html");
    assert!(
        page.is_file(),
        "montrace run writes report.html at its end: {run:?}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("hold begins") && html.contains("hold ends"),
        "the marks are drawn"
    );

    // The error check is real: a page that throws is caught by it.
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("broken.html");
    std::fs::write(
        &broken,
        "<!DOCTYPE html><p>x</p><script>undefinedFunction();</script>",
    )
    .unwrap();
    let bad = screenshot(&broken);
    assert!(
        !bad.page_console(&broken).is_empty(),
        "the console check does not see a thrown error; chromium's stderr:\n{}",
        bad.finished.stderr
    );

    let shot = screenshot(&page);
    assert_eq!(
        shot.page_console(&page),
        Vec::<&str>::new(),
        "the report logged errors"
    );
    assert_eq!(png_size(&shot.png), WINDOW);
    // Not blank: a blank page of the same size compresses to a few KiB.
    let empty = tmp.path().join("empty.html");
    std::fs::write(&empty, "<!DOCTYPE html><title>empty</title>").unwrap();
    let blank = screenshot(&empty);
    assert!(
        shot.png.len() > 20_000 && shot.png.len() > 5 * blank.png.len(),
        "the screenshot looks blank: {} bytes, a blank page {} bytes",
        shot.png.len(),
        blank.png.len()
    );

    // After its script ran: the tables, every plot and the timeline are in the page.
    let dom = dump_dom(&page);
    for needle in [
        "Groups",
        "Private memory (USS) per group",
        "RSS vs USS per group",
        "Total private memory",
        "CPU per group",
        "Cumulative CPU time per group",
        "Active instances per group, stacked",
        "Process tree timeline",
        "By CPU time",
        "By peak memory",
    ] {
        assert!(dom.contains(needle), "the rendered page lacks {needle:?}");
    }
    // The top processes show each command whole: the root shell's ends, past 80 characters,
    // with its last loop.
    let root_row = dom
        .lines()
        .find(|l| l.contains("<td class=\"cmd\">sh -c ") && l.contains("mark --begin hold"))
        .expect("the root shell in the top processes");
    assert!(
        root_row.contains("for i in 1 2 3 4 5; do /bin/true; done</td>"),
        "{root_row}"
    );
    // The timeline's axis stays in view; a narrow window says which columns it hides.
    assert!(dom.contains(r#"<div class="axis"><svg"#));
    assert!(dom.contains("A narrow window: samples, agg. peak PSS"));
    // A narrow and a wide window: no errors, the whole page drawn at that width.
    for size in [(800, 1600), (1400, 2000)] {
        let shot = screenshot_at(&page, size);
        assert_eq!(shot.page_console(&page), Vec::<&str>::new(), "at {size:?}");
        assert_eq!(png_size(&shot.png), size);
    }
    let processes = run.processes();
    // One timeline bar per process (small runs are not merged), each with its tooltip.
    let holder_bars = dom.matches(&format!("{}: pid ", "holder")).count();
    assert_eq!(holder_bars, 3, "one bar per holder");
    assert!(processes.len() >= 9);
}

#[test]
fn montrace_report_writes_both_formats_and_says_where() {
    let run = recorded_run();
    let out = run_with_timeout(
        Command::new(montrace_bin())
            .args(["report", "--format", "both", "--group-by", "comm"])
            .arg(&run.dir),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let listed: Vec<PathBuf> = out.stdout.lines().map(PathBuf::from).collect();
    assert_eq!(
        listed,
        [run.dir.join("report.html"), run.dir.join("report.md")],
        "{out:?}"
    );
    let md = std::fs::read_to_string(run.dir.join("report.md")).unwrap();
    assert!(md.contains("- **Grouped by:** comm"), "{md}");
    // Every plot the Markdown links to is beside it.
    for line in md.lines().filter(|l| l.starts_with("![")) {
        let file = line
            .rsplit_once('(')
            .and_then(|(_, f)| f.strip_suffix(')'))
            .unwrap();
        let svg = std::fs::read_to_string(run.dir.join(file))
            .unwrap_or_else(|e| panic!("{file} is linked but missing: {e}"));
        assert!(svg.starts_with("<svg"), "{file}");
    }
    // The holders are a group of three with their 20 MiB each.
    let holder = md
        .lines()
        .find(|l| l.starts_with("| holder |"))
        .unwrap_or_else(|| panic!("no holder group:\n{md}"));
    let cells: Vec<&str> = holder.split('|').map(str::trim).collect();
    assert_eq!(cells[2], "3", "{holder}");
}

#[test]
fn report_and_export_of_a_missing_run_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nothing-here");
    for args in [
        vec!["report"],
        vec!["export", "--format", "csv"],
        vec!["export", "--format", "perfetto"],
    ] {
        let out = run_with_timeout(
            Command::new(montrace_bin()).args(&args).arg(&missing),
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("does not exist") && out.stderr.contains("montrace run"),
            "{args:?}: {out:?}"
        );
    }
}

#[test]
fn exports_have_a_track_per_process_and_every_row() {
    let run = recorded_run();
    let processes = run.processes();

    let trace = run.dir.join("trace.json");
    let out = run_with_timeout(
        Command::new(montrace_bin())
            .args(["export", "--format", "perfetto"])
            .arg(&run.dir),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), trace.display().to_string());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).expect("valid JSON");
    let events = json["traceEvents"].as_array().expect("traceEvents");
    let mut tracks: Vec<u64> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name" && e["pid"] != 0)
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    tracks.sort_unstable();
    tracks.dedup();
    assert_eq!(tracks.len(), processes.len());
    let counters = events.iter().filter(|e| e["ph"] == "C").count();
    assert!(counters > 0, "no counter events");
    let marks = events.iter().filter(|e| e["ph"] == "i").count();
    assert_eq!(marks, 2);

    let csv = run.dir.join("csv");
    let out = run_with_timeout(
        Command::new(montrace_bin())
            .args(["export", "--format", "csv", "--out"])
            .arg(&csv)
            .arg(&run.dir),
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let expected = [
        ("processes", processes.len()),
        ("events", run.events().len()),
        ("samples", run.samples().len()),
        ("marks", run.marks().len()),
    ];
    for (table, rows) in expected {
        let text = std::fs::read_to_string(csv.join(format!("{table}.csv")))
            .unwrap_or_else(|e| panic!("{table}.csv: {e}"));
        assert_eq!(csv_records(&text) - 1, rows, "{table}.csv");
    }
}

/// Records of a CSV text (RFC 4180: line breaks inside quotes do not end a record).
fn csv_records(text: &str) -> usize {
    let mut quoted = false;
    let mut records = 0;
    for c in text.chars() {
        match c {
            '"' => quoted = !quoted,
            '\n' if !quoted => records += 1,
            _ => {}
        }
    }
    records
}

/// The report of a 5,000-process shell loop: under 1 MB (plots keep what a pixel can show, the
/// timeline merges the 5,000 siblings into one row), and it opens in headless Chromium without
/// an error.
#[test]
fn a_5000_process_loop_reports_in_under_a_megabyte() {
    let run = run_montrace(
        &[],
        &["sh", "-c", "for i in $(seq 5000); do /bin/true; done"],
    );
    run.assert_code(0);
    assert_eq!(run.processes().len(), 5002);
    let page = run.dir.join("report.html");
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(size < 1 << 20, "report.html is {size} bytes");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("true ×5000"),
        "one timeline row for the 5,000 siblings"
    );
    let shot = screenshot(&page);
    assert_eq!(shot.page_console(&page), Vec::<&str>::new());
    assert_eq!(png_size(&shot.png), WINDOW);
}
