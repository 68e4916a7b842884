//! `montrace report`: the HTML and Markdown report of a run directory.
//!
//! Data flow: [`load`] reads the run directory (by column name, tolerating missing optional
//! tables and columns) -> [`model`] derives groups, the per-group table, top processes and time
//! series (pure) -> [`plots`] (SVG through `plotters`, after [`downsample`]) and [`timeline`]
//! (the process tree as SVG bars) -> [`render`] fills the `minijinja` templates `report.html`
//! and `report.md`. Only [`write_report`] touches the file system for output (and
//! `commands::report`, which says where it went).
//! docs/report.md describes the report for its readers.

/// The run reader lives with the run directory's other code (`store::read`).
pub use crate::store::read as load;
pub mod downsample;
pub mod model;
pub mod plots;
pub mod render;
#[cfg(any(test, feature = "synthetic"))]
pub mod synthetic;
pub mod timeline;

use std::path::{Path, PathBuf};

use anyhow::Context as _;

#[cfg(any(test, feature = "synthetic"))]
pub use synthetic::{add_synthetic_gpu, add_synthetic_gpu_processes, synthetic_run};

/// The file names written into the run directory.
pub const HTML_FILE: &str = "report.html";
pub const MARKDOWN_FILE: &str = "report.md";

/// Top processes listed by CPU time and by memory.
pub const TOP_PROCESSES: usize = 10;
/// Groups listed in the per-group table; the rest are summed up in one line.
pub const TABLE_GROUPS: usize = 100;

/// Everything the templates show, prepared once for both formats.
pub struct Report {
    pub data: load::RunData,
    pub model: model::Model,
    pub group_by: model::GroupBy,
    pub plots: Vec<plots::Plot>,
    pub timeline: timeline::Timeline,
    pub timeline_svg: String,
    /// The timeline as the HTML page shows it: strips of rows, folded rows that open.
    pub timeline_html: String,
    /// The parallelism plot of "Where the time went" (only with run.json `time`).
    pub time_plot: Option<plots::Plot>,
}

/// Reads `run_dir` and derives every figure, plot and the timeline of its report.
pub fn prepare(run_dir: &Path, group_by: &str) -> anyhow::Result<Report> {
    let by = model::GroupBy::parse(group_by).map_err(anyhow::Error::msg)?;
    load::check_run_dir(run_dir)?;
    let data = load::load(run_dir)?;
    Ok(prepare_data(data, by))
}

/// [`prepare`] for data already loaded.
pub fn prepare_data(mut data: load::RunData, by: model::GroupBy) -> Report {
    if data.marks.len() > MAX_DRAWN_MARKS {
        data.notes.push(format!(
            "{} phase marks: {MAX_DRAWN_MARKS} of them, spread over the run, are drawn; every one \
             is in marks.parquet",
            data.marks.len()
        ));
    }
    let model = model::build(&data, &by);
    // plotters only fails on a broken backend; a report without plots is still a report.
    let failed = |e: String| plots::Plot {
        id: "error".into(),
        title: "Plots".into(),
        caption: format!("The plots could not be drawn: {e}"),
        svg: String::new(),
    };
    let plots = plots::all(&data, &model).unwrap_or_else(|e| vec![failed(e)]);
    let time_plot = data
        .info
        .as_ref()
        .filter(|info| info.time.is_some())
        .and_then(|info| {
            let cores = info.capacity.as_ref().map(|c| c.cpu_cores);
            plots::parallelism(&data, &model, cores).unwrap_or_else(|e| Some(failed(e)))
        });
    let limits = timeline::Limits::default();
    let tl = timeline::layout(&data, &model, limits);
    let timeline_svg = timeline::svg(&data, &model, &tl, limits);
    let timeline_html = timeline::html(&data, &model, &tl, limits);
    Report {
        data,
        model,
        group_by: by,
        plots,
        timeline: tl,
        timeline_svg,
        timeline_html,
        time_plot,
    }
}

/// `montrace report` formats (`--format`; cli.rs re-exports it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Html,
    Md,
    Both,
}

/// Writes the report of `run_dir` into it: `report.html` and/or `report.md` with its
/// `report-*.svg` plots. Returns the files written. Called at the end of `montrace run`, once
/// run.json and every table are final.
pub fn write_report(
    run_dir: &Path,
    format: ReportFormat,
    group_by: &str,
) -> anyhow::Result<Vec<PathBuf>> {
    let report = prepare(run_dir, group_by)?;
    let mut written = Vec::new();
    if matches!(format, ReportFormat::Html | ReportFormat::Both) {
        let path = run_dir.join(HTML_FILE);
        write_atomically(&path, render::html(&report)?.as_bytes())?;
        written.push(path);
    }
    if matches!(format, ReportFormat::Md | ReportFormat::Both) {
        let (markdown, files) = render::markdown(&report)?;
        for (name, svg) in files {
            let path = run_dir.join(name);
            write_atomically(&path, svg.as_bytes())?;
            written.push(path);
        }
        let path = run_dir.join(MARKDOWN_FILE);
        write_atomically(&path, markdown.as_bytes())?;
        written.push(path);
    }
    Ok(written)
}

/// The report `montrace run` writes at its end: both formats, grouped by executable.
pub fn write_default_report(run_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    write_report(run_dir, ReportFormat::Both, "exe")
}

/// Writes `path` under a temporary name and renames it, so a reader never sees half a file
/// (see [`crate::store::userfs::write_atomic`]: no symlink is followed, no leftover stays).
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    crate::store::userfs::write_atomic(path, bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Group colours: Tableau 10, a palette made to tell categories apart. A group's colour is its
/// rank (largest CPU time first), so it is the same in every plot and in the timeline.
pub const PALETTE: [(u8, u8, u8); 10] = [
    (78, 121, 167),
    (242, 142, 43),
    (225, 87, 89),
    (118, 183, 178),
    (89, 161, 79),
    (237, 201, 72),
    (176, 122, 161),
    (255, 157, 167),
    (156, 117, 95),
    (186, 176, 172),
];
/// "other" (the groups summed together).
pub const OTHER: (u8, u8, u8) = (140, 140, 140);

pub fn color_rgb(group: Option<usize>) -> (u8, u8, u8) {
    group.map_or(OTHER, |g| PALETTE[g % PALETTE.len()])
}

pub fn color_hex(group: Option<usize>) -> String {
    let (r, g, b) = color_rgb(group);
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// Seconds with about four significant digits: `0.188 s`, `12.35 s`, `600.0 s`.
pub fn fmt_secs(s: f64) -> String {
    let a = s.abs();
    if a < 10.0 {
        format!("{s:.3} s")
    } else if a < 100.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.1} s")
    }
}

/// `150%`, `9.5%`.
pub fn fmt_percent(p: f64) -> String {
    if p.abs() >= 10.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// Text for SVG/XML: the five special characters escaped.
pub fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Marks drawn at most in a plot or the timeline: more would hide the data (and a command can send
/// thousands). The rest are in marks.parquet, and the report says so.
pub const MAX_DRAWN_MARKS: usize = 30;

/// The marks to draw: all of them up to [`MAX_DRAWN_MARKS`], else that many spread evenly over
/// the run's marks in time order (the first and the last among them).
pub fn drawn_marks(marks: &[load::Mark]) -> Vec<&load::Mark> {
    let n = marks.len();
    if n <= MAX_DRAWN_MARKS {
        return marks.iter().collect();
    }
    (0..MAX_DRAWN_MARKS)
        .map(|i| &marks[i * (n - 1) / (MAX_DRAWN_MARKS - 1)])
        .collect()
}

/// A mark as people read it: `build`, `build begins`, `build ends`.
pub fn mark_text(mark: &load::Mark) -> String {
    match mark.kind.as_str() {
        "begin" => format!("{} begins", mark.label),
        "end" => format!("{} ends", mark.label),
        _ => mark.label.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tests/fixtures/run-small: a real run of
    /// `sh -c 'for i in 1 2 3; do sh -c "x=$(head -c 20000000 /dev/zero | tr "\0" a); sleep 0.3" & done; wait; for i in $(seq 5); do /bin/true; done'`
    /// at `--interval 100ms`.
    pub(crate) fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/run-small")
    }

    #[test]
    fn a_flood_of_marks_draws_a_few_dozen_spread_over_the_run() {
        let mark = |i: usize| load::Mark {
            time_ns: i as i64,
            label: format!("m{i}"),
            kind: "point".into(),
        };
        let few: Vec<load::Mark> = (0..5).map(mark).collect();
        assert_eq!(drawn_marks(&few).len(), 5);
        let many: Vec<load::Mark> = (0..100_000).map(mark).collect();
        let drawn = drawn_marks(&many);
        assert_eq!(drawn.len(), MAX_DRAWN_MARKS);
        assert_eq!(drawn[0].label, "m0");
        assert_eq!(drawn[MAX_DRAWN_MARKS - 1].label, "m99999");
        assert!(drawn.windows(2).all(|w| w[0].time_ns < w[1].time_ns));
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_secs(0.1876), "0.188 s");
        assert_eq!(fmt_secs(12.345), "12.35 s");
        assert_eq!(fmt_secs(600.04), "600.0 s");
        assert_eq!(fmt_percent(150.2), "150%");
        assert_eq!(fmt_percent(9.54), "9.5%");
        assert_eq!(xml_escape(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&#39;");
        assert_eq!(color_hex(Some(0)), "#4e79a7");
        assert_eq!(color_hex(Some(10)), "#4e79a7");
        assert_eq!(color_hex(None), "#8c8c8c");
    }

    /// The fixture (a run of schema version 1, `Timestamp(ns, "UTC")`) rewritten as version 2
    /// (`Timestamp(ns)`) and as version 3 (`Timestamp(us, "UTC")` with exact Int64 `_ns` twins
    /// appended) reports the same, to the byte: montrace reads every version alike.
    #[test]
    fn runs_of_every_schema_version_report_the_same() {
        use arrow_array::cast::AsArray as _;
        use arrow_array::types::TimestampNanosecondType;
        use arrow_array::{ArrayRef, Int64Array, RecordBatch, TimestampMicrosecondArray};
        use arrow_schema::{DataType, Field, Schema, TimeUnit};
        use std::sync::Arc;
        let rewritten = |version: u32| -> tempfile::TempDir {
            let dir = tempfile::tempdir().unwrap();
            for entry in std::fs::read_dir(fixture()).unwrap() {
                let path = entry.unwrap().path();
                let to = dir.path().join(path.file_name().unwrap());
                if path.extension().is_none_or(|e| e != "parquet") {
                    std::fs::copy(&path, &to).unwrap();
                    continue;
                }
                let batches = load::read_file(&path).unwrap();
                assert_eq!(batches.len(), 1, "{}", path.display());
                let batch = &batches[0];
                let (mut fields, mut columns, mut twins) = (Vec::new(), Vec::new(), Vec::new());
                for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
                    let DataType::Timestamp(TimeUnit::Nanosecond, Some(_)) = field.data_type()
                    else {
                        fields.push(field.as_ref().clone());
                        columns.push(Arc::clone(column));
                        continue;
                    };
                    let ns: Vec<Option<i64>> = column
                        .as_primitive::<TimestampNanosecondType>()
                        .iter()
                        .collect();
                    let (data_type, array): (DataType, ArrayRef) = match version {
                        2 => (
                            DataType::Timestamp(TimeUnit::Nanosecond, None),
                            Arc::new(
                                column
                                    .as_primitive::<TimestampNanosecondType>()
                                    .clone()
                                    .with_timezone_opt(None::<String>),
                            ),
                        ),
                        _ => {
                            let us: Vec<Option<i64>> =
                                ns.iter().map(|v| v.map(|v| v.div_euclid(1_000))).collect();
                            twins.push((
                                Field::new(
                                    format!("{}_ns", field.name()),
                                    DataType::Int64,
                                    field.is_nullable(),
                                ),
                                Arc::new(Int64Array::from(ns)) as ArrayRef,
                            ));
                            (
                                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                                Arc::new(TimestampMicrosecondArray::from(us).with_timezone("UTC")),
                            )
                        }
                    };
                    fields.push(field.as_ref().clone().with_data_type(data_type));
                    columns.push(array);
                }
                for (field, column) in twins {
                    fields.push(field);
                    columns.push(column);
                }
                let schema = Arc::new(Schema::new(fields));
                let batch = RecordBatch::try_new(Arc::clone(&schema), columns).unwrap();
                crate::store::writer::write_table(&to, schema, &batch).unwrap();
            }
            dir
        };
        let report = |dir: &Path| {
            let (text, _) = render::markdown(&prepare(dir, "exe").unwrap()).unwrap();
            text.replace(&dir.display().to_string(), "RUN")
        };
        let v1 = report(&fixture());
        assert!(v1.contains("22"), "{v1}");
        for version in [2, 3] {
            let dir = rewritten(version);
            assert_eq!(report(dir.path()), v1, "version {version}");
        }
    }

    #[test]
    fn writes_both_formats_into_the_run_directory() {
        let dir = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(fixture()).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
        let written = write_report(dir.path(), ReportFormat::Both, "exe").unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.first().map(String::as_str), Some(HTML_FILE));
        assert_eq!(names.last().map(String::as_str), Some(MARKDOWN_FILE));
        assert!(
            names.contains(&"report-timeline.svg".to_string()),
            "{names:?}"
        );
        for path in &written {
            assert!(path.is_file(), "{}", path.display());
            assert!(path.starts_with(dir.path()));
        }
        // Nothing half-written is left behind.
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.ends_with(".tmp").then_some(name)
            })
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    /// 5,000 short processes and 10 minutes of samples at 200 ms fit an HTML file under 10 MB,
    /// with the timeline merged. (How fast it renders is `cargo xtask bench`'s business, through
    /// `examples/synthetic_run.rs`: timed unit tests would fail on a busy machine.)
    #[test]
    fn a_large_run_renders_into_a_small_page() {
        let dir = tempfile::tempdir().unwrap();
        synthetic_run(
            dir.path(),
            5_000,
            std::time::Duration::from_secs(600),
            std::time::Duration::from_millis(200),
        )
        .unwrap();
        let written = write_report(dir.path(), ReportFormat::Html, "exe").unwrap();
        let size = std::fs::metadata(&written[0]).unwrap().len();
        assert!(size < 10 << 20, "{size} bytes");
        let report = prepare(dir.path(), "exe").unwrap();
        assert_eq!(report.data.processes.len(), 5_000);
        // Merged into a handful of rows: make, sh ×1666, cc1 ×1666, as ×1666, true.
        assert!(report.timeline.merged);
        assert_eq!(report.timeline.rows.len(), 5);
    }

    /// Both reports of `run_dir`: the Markdown with its files, and the HTML page.
    fn rendered(run_dir: &Path) -> (String, Vec<(String, String)>, String) {
        let report = prepare(run_dir, "exe").unwrap();
        let (markdown, files) = render::markdown(&report).unwrap();
        (markdown, files, render::html(&report).unwrap())
    }

    #[test]
    fn gpu_processes_add_the_tree_plot_and_column_and_nothing_else() {
        use synthetic::{GPU_MEMORY_CC1, GPU_MEMORY_MAKE};
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path();
        let (processes, duration, interval) = (
            40,
            std::time::Duration::from_secs(4),
            std::time::Duration::from_millis(200),
        );
        synthetic_run(run, processes, duration, interval).unwrap();
        synthetic::add_synthetic_gpu(run, duration, interval, 2).unwrap();
        let before = rendered(run);

        synthetic::add_synthetic_gpu_processes(run, processes, duration, interval).unwrap();
        let mut data = load::load(run).unwrap();
        let accounting = data.gpu_processes.iter().filter(|r| r.accounting).count();
        let cc1s = data.processes.iter().filter(|p| p.comm == "cc1").count();
        assert_eq!(accounting, cc1s, "one accounting row per cc1");
        assert!(data
            .gpu_processes
            .iter()
            .filter(|r| r.accounting)
            .all(|r| r.gpu_memory_bytes.is_none()));
        // Accounting rows are whole-life figures: a memory figure in one, even at a sweep's
        // time, would not be plotted as a sample.
        let sweep_time = data.samples[0].time_ns;
        for r in data.gpu_processes.iter_mut().filter(|r| r.accounting) {
            r.gpu_memory_bytes = Some(1 << 40);
            r.time_ns = sweep_time;
        }
        let report = prepare_data(data, model::GroupBy::Exe);
        let (data, model) = (&report.data, &report.model);

        // At every sweep: 512 MiB per cc1 sampled, 1 GiB for make, nothing for sh and as.
        let group = |name: &str| model.groups.iter().position(|g| g.name == name).unwrap();
        let expected = |t: i64, exe: &str, bytes: u64| -> u64 {
            let n = data
                .samples
                .iter()
                .filter(|s| !s.exit && s.time_ns == t && data.processes[s.process].comm == exe)
                .count();
            n as u64 * bytes
        };
        let gpu_at = |g: usize, sweep: usize| -> u64 {
            model.group_sweeps[g]
                .iter()
                .find(|(k, _)| *k == sweep)
                .and_then(|(_, sum)| sum.gpu_memory)
                .unwrap_or(0)
        };
        let mut cc1_peak = 0;
        for (k, &t) in model.sweeps.iter().enumerate() {
            assert_eq!(
                gpu_at(group("cc1"), k),
                expected(t, "cc1", GPU_MEMORY_CC1),
                "{k}"
            );
            assert_eq!(
                gpu_at(group("make"), k),
                expected(t, "make", GPU_MEMORY_MAKE),
                "{k}"
            );
            assert_eq!(gpu_at(group("sh"), k), 0, "{k}");
            assert_eq!(gpu_at(group("as"), k), 0, "{k}");
            cc1_peak = cc1_peak.max(gpu_at(group("cc1"), k));
        }
        assert!(cc1_peak >= 2 * GPU_MEMORY_CC1, "cc1s overlap: {cc1_peak}");
        assert_eq!(
            model.groups[group("cc1")].agg_peak_gpu_memory,
            Some(cc1_peak)
        );
        assert_eq!(model.groups[group("sh")].agg_peak_gpu_memory, Some(0));

        // The plot: before the device-wide GPU plots, one line per group that used the GPU,
        // with the marks.
        let ids: Vec<&str> = report.plots.iter().map(|p| p.id.as_str()).collect();
        let at = ids.iter().position(|&id| id == "gpu-tree-memory").unwrap();
        assert_eq!(ids[at + 1], "gpu-utilization-gpu-percent");
        let svg = &report.plots[at].svg;
        for text in ["cc1", "make", "compile begins", "link"] {
            assert!(svg.contains(&format!(">\n{text}\n</text>")), "{text}");
        }
        for text in ["sh", "as"] {
            assert!(!svg.contains(&format!(">\n{text}\n</text>")), "{text}");
        }
        // The table: one more column, after agg. peak PSS.
        let table = render::group_table_markdown(&report);
        assert!(
            table.starts_with(
                "| | group | instances | samples | peak USS / instance | peak RSS / instance | \
                 agg. peak USS | agg. peak RSS | agg. peak PSS | agg. peak GPU mem | peak CPU |"
            ),
            "{table}"
        );
        let row = |name: &str| {
            let row = table
                .lines()
                .find(|l| l.split(" | ").nth(1) == Some(name))
                .unwrap();
            row.split(" | ").nth(9).unwrap().to_string()
        };
        assert_eq!(row("make"), crate::units::format_bytes(GPU_MEMORY_MAKE));
        assert_eq!(row("cc1"), crate::units::format_bytes(cc1_peak));
        assert_eq!(row("sh"), "0 B");

        // The Markdown report has it as a file; the HTML inline.
        let (markdown, files, html) = rendered(run);
        assert!(
            markdown.contains("![GPU memory of the tree per group](report-gpu-tree-memory.svg)")
        );
        assert!(files.iter().any(|f| f.0 == "report-gpu-tree-memory.svg"));
        assert!(html.contains("GPU memory of the tree per group"));

        // Without gpu_processes.parquet, or with only accounting rows in it, the reports are
        // byte for byte what they were.
        std::fs::remove_file(run.join("gpu_processes.parquet")).unwrap();
        assert!(rendered(run) == before);
        let mut table = crate::store::writer::PartedTable::gpu_processes(run).unwrap();
        let make = &prepare(run, "exe").unwrap().data.processes[0];
        table
            .push(crate::store::records::GpuProcessRecord {
                time_ns: sweep_time,
                pid: make.pid,
                start_time_ns: make.start_ns,
                source: crate::store::records::GpuProcessSource::Accounting,
                gpu_memory_bytes: Some(1 << 40),
                ..Default::default()
            })
            .unwrap();
        table.finish().unwrap();
        assert!(rendered(run) == before);
    }

    #[test]
    fn a_missing_or_foreign_run_directory_is_refused_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let err = load::check_run_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is not a montrace run directory"), "{err}");
        // A directory of repetitions names one of them.
        let rep = dir.path().join("rep-001");
        std::fs::create_dir(&rep).unwrap();
        std::fs::copy(
            fixture().join("processes.parquet"),
            rep.join("processes.parquet"),
        )
        .unwrap();
        let err = load::check_run_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains("holds repetitions"), "{err}");
        assert!(err.contains("rep-001"), "{err}");
    }
}
