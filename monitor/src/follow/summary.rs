//! The summary printed to stderr at the end of `run` and `attach` (like `/usr/bin/time -v` for
//! the whole tree) and of a `--repeat` series: pure text over run.json's and summary.json's
//! types, kept apart from the store that reads and writes those files.
use crate::store::run_json::RunInfo;
use crate::units::{format_bytes, format_seconds_ns};

/// The summary printed to stderr at the end, like `/usr/bin/time -v` for the whole tree.
pub fn format_summary(info: &RunInfo) -> String {
    let t = &info.totals;
    let status = match (info.exit_code, info.exit_signal) {
        (Some(code), _) => format!("exited with {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "unknown".to_string(),
    };
    let peak = match (t.peak_rss_bytes, t.peak_rss_pid, &t.peak_rss_comm) {
        (Some(bytes), Some(pid), Some(comm)) => {
            format!("{} (pid {pid}, {comm})", format_bytes(bytes))
        }
        _ => "n/a".to_string(),
    };
    let lost = info.lost_events.total();
    let mut lines = vec![
        format!("montrace: {}", info.command),
        format!("  exit status          {status}"),
        format!(
            "  wall time            {:.3}s{}",
            info.command_wall_s.unwrap_or(info.duration_s),
            info.startup_ms.map_or(String::new(), |ms| format!(
                " (+{ms:.0} ms montrace start-up)"
            ))
        ),
        format!(
            "  processes started    {} (at most {} at once)",
            info.processes_started, info.max_concurrent
        ),
        format!(
            "  CPU user / system    {} / {} (whole tree{})",
            format_seconds_ns(t.cpu_user_ns),
            format_seconds_ns(t.cpu_system_ns),
            if t.unfinished_processes > 0 {
                format!(
                    ", processes that ended; + {} / {} sampled of {} still running or lost",
                    format_seconds_ns(t.unfinished_cpu_user_ns),
                    format_seconds_ns(t.unfinished_cpu_system_ns),
                    t.unfinished_processes
                )
            } else {
                String::new()
            }
        ),
        format!("  peak RSS, largest    {peak}"),
        format!(
            "  peak RSS, whole tree {}",
            info.tree_memory_peaks
                .rss_bytes
                .map_or("n/a (no samples)".to_string(), format_bytes)
        ),
        format!(
            "  I/O read / written   {} / {}",
            format_bytes(t.read_bytes),
            format_bytes(t.write_bytes)
        ),
        if info.tracking_mode == crate::kernel::ebpf::TrackingMode::Polling {
            // Polling cannot know what it missed between two scans.
            "  lost events          unknown (polling /proc: processes shorter than the interval may be missed)".to_string()
        } else {
            format!(
                "  lost events          {lost}{}",
                if lost > 0 {
                    format!(
                    " (ring buffer full: {}, tracked map full: {}) - figures are incomplete; try --ring-buffer-size",
                    info.lost_events.ringbuf_full, info.lost_events.track_map_full
                )
                } else {
                    String::new()
                }
            )
        },
    ];
    if info.marks_dropped > 0 {
        lines.push(format!(
            "  marks dropped        {} (over the budget of marks a run keeps)",
            info.marks_dropped
        ));
    }
    if let Some(why) = &info.recording_error {
        lines.push(format!(
            "  RECORDING STOPPED    {why}: the run directory holds what was written before"
        ));
    }
    if t.alive_at_end > 0 {
        lines.push(format!(
            "  still running        {} (recorded as alive_at_end)",
            t.alive_at_end
        ));
    }
    if let Some(b) = &info.limit_breach {
        lines.push(format!(
            "  LIMIT BREACHED       {}: {} > {} after {:.3}s; the tree was stopped",
            b.limit,
            format_limit_value(&b.limit, b.value),
            format_limit_value(&b.limit, b.threshold),
            b.elapsed_s
        ));
    }
    lines.extend(info.gpu.format_lines());
    // Inside a limited container, say what the run could use (the host's figures go unsaid).
    if let Some(capacity) = info.capacity.as_ref().filter(|c| c.limited()) {
        lines.push(format!("  capacity (limited)   {}", capacity.describe()));
    }
    match (info.cgroup.cpu_coverage, &info.cgroup.path) {
        (Some(coverage), _) => lines.push(format!(
            "  CPU coverage         {:.1}% of the cgroup's total",
            coverage * 100.0
        )),
        // Unknown is not 0 %.
        (None, None) => lines.push("  CPU coverage         unavailable (no run cgroup)".into()),
        (None, Some(_)) => {}
    }
    lines.push(format!("  run directory        {}", info.out_dir));
    lines.join("\n") + "\n"
}

/// The end of `--repeat`: each metric's median and spread over the repetitions.
pub fn format_repeat_stats(summary: &crate::store::summary_json::Summary, out_dir: &str) -> String {
    let mut lines = vec![format!(
        "montrace: {} ({} repetitions{})",
        summary.command,
        summary.repetitions.len(),
        if summary.warmup > 0 {
            format!(", {} warm-up", summary.warmup)
        } else {
            String::new()
        }
    )];
    for def in crate::store::summary_json::METRICS {
        let Some(s) = summary.stats.get(def.name) else {
            continue;
        };
        let show = |v: f64| match def.unit {
            "B" => format_bytes(v as u64),
            "s" => format!("{v:.3}s"),
            "J" => format!("{v:.1} J"),
            "share" => format!("{:.1}%", v * 100.0),
            _ => format!("{v:.0}"),
        };
        lines.push(format!(
            "  {:<22} median {:>12}  mean {:>12}  stddev {:>12}",
            def.name,
            show(s.median),
            show(s.mean),
            show(s.stddev)
        ));
    }
    lines.push(format!(
        "  summary              {out_dir}/{}",
        crate::store::summary_json::SUMMARY_FILE
    ));
    lines.join("\n") + "\n"
}

fn format_limit_value(limit: &str, value: f64) -> String {
    match limit {
        "rss" | "gpu-mem" => format_bytes(value as u64),
        "cpu" | "wall" => format!("{value:.3}s"),
        _ => format!("{value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::run_json::tests::sample_info;

    #[test]
    fn summary_mentions_every_headline_figure() {
        let info = sample_info();
        let text = format_summary(&info);
        for needle in [
            "make -j8",
            "killed by signal 9",
            "2.500s",
            "12 (at most 4 at once)",
            "1.500s / 0.250s",
            "200.0 MiB (pid 1, p1)",
            "lost events          3 (ring buffer full: 3",
            "runs/x",
            "peak RSS, whole tree 300.0 MiB",
            "CPU coverage         99.5%",
            "LIMIT BREACHED       rss: 150.0 MiB > 100.0 MiB after 1.250s",
        ] {
            assert!(text.contains(needle), "summary lacks {needle:?}:\n{text}");
        }
    }
}
