// TEMPORARY (report agent): drives the report code until main.rs is wired. Delete me.
use std::time::{Duration, Instant};
fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args[1].as_str() {
        "synth" => {
            let t = Instant::now();
            monitor::report::synthetic_run(
                std::path::Path::new(&args[2]),
                args[3].parse()?,
                Duration::from_secs(args[4].parse()?),
                Duration::from_millis(200),
            )?;
            eprintln!("synthetic run written in {:?}", t.elapsed());
        }
        "report" => {
            let t = Instant::now();
            let files = monitor::report::write_report(
                std::path::Path::new(&args[2]),
                monitor::cli::ReportFormat::Both,
                args.get(3).map_or("exe", |s| s.as_str()),
            )?;
            eprintln!("report in {:?}", t.elapsed());
            for f in files {
                eprintln!("{} {}", f.display(), std::fs::metadata(&f)?.len());
            }
        }
        "html" => {
            let t = Instant::now();
            let files = monitor::report::write_report(
                std::path::Path::new(&args[2]),
                monitor::cli::ReportFormat::Html,
                "exe",
            )?;
            eprintln!("html report in {:?}", t.elapsed());
            for f in files {
                eprintln!("{} {}", f.display(), std::fs::metadata(&f)?.len());
            }
        }
        "perfetto" => {
            monitor::export::write_perfetto(std::path::Path::new(&args[2]), std::path::Path::new(&args[3]))?;
        }
        "md" => {
            let r = monitor::report::prepare(std::path::Path::new(&args[2]), "exe")?;
            std::fs::write("/tmp/snap_table.md", monitor::report::render::group_table_markdown(&r))?;
            std::fs::write("/tmp/snap_report.md", monitor::report::render::markdown(&r)?.0)?;
        }
        _ => anyhow::bail!("?"),
    }
    Ok(())
}
