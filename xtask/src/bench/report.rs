//! The benchmark's results: a model, its JSON form (`bench/results.json`) and its Markdown form
//! (`BENCHMARKS.md`).

use serde_json::{json, Value};

/// Everything one `cargo xtask bench` run measured.
pub struct Results {
    /// The command that produced them, e.g. `cargo xtask bench --quick`.
    pub command: String,
    pub quick: bool,
    /// UTC date and time of the start, `2024-05-01 12:00 UTC`.
    pub date_utc: String,
    /// `git describe`-like revision of the workspace, with `-dirty` for uncommitted changes.
    pub revision: String,
    pub machine: Machine,
    /// The nice value the benchmark ran at (`None`: the default).
    pub nice: Option<i32>,
    pub duration_s: f64,
    pub sections: Vec<Section>,
}

pub struct Machine {
    pub cpu_model: String,
    pub cpus: usize,
    pub kernel: String,
    pub os: String,
    pub mem_gib: f64,
}

/// One section of BENCHMARKS.md: how it was measured, a table, and the figures behind it.
#[derive(Default)]
pub struct Section {
    /// Short key (`completeness`), also the JSON key.
    pub id: &'static str,
    /// The group it was measured in (`tree`, `overhead`, ...; see `cargo xtask bench --only`).
    pub group: &'static str,
    /// Heading, e.g. `1. Completeness`.
    pub title: String,
    /// How it was measured (Markdown).
    pub method: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// The numbers, for machines (and the targets table).
    pub figures: Vec<Figure>,
    /// What the figures mean, and what remains where a target is missed (Markdown).
    pub notes: Vec<String>,
    pub load: Option<Load>,
    /// Wall time the section took, seconds.
    pub elapsed_s: f64,
}

/// One measured figure.
pub struct Figure {
    pub key: String,
    pub label: String,
    pub unit: String,
    /// The figure (usually the median of `runs`); `None` when it could not be measured.
    pub value: Option<f64>,
    /// Every run's value.
    pub runs: Vec<f64>,
    /// How it shows in the targets table.
    pub display: String,
    pub target: Option<Target>,
}

pub struct Target {
    /// The target in words, e.g. `≤ 1.05×`.
    pub text: String,
    pub met: bool,
}

/// The machine's load averages (1, 5, 15 minutes) before and after a section.
#[derive(Clone, Copy)]
pub struct Load {
    pub before: [f64; 3],
    pub after: [f64; 3],
}

impl Load {
    /// Other work was running (the 1-minute load average, before or after, is at least 1 on this
    /// 2-core machine): timing figures of the section are noisy.
    pub fn busy(&self) -> bool {
        self.before[0] >= 1.0 || self.after[0] >= 1.0
    }
}

impl Figure {
    pub fn new(key: &str, label: &str, unit: &str, value: Option<f64>, display: String) -> Self {
        Figure {
            key: key.to_string(),
            label: label.to_string(),
            unit: unit.to_string(),
            value,
            runs: Vec::new(),
            display,
            target: None,
        }
    }

    pub fn runs(mut self, runs: Vec<f64>) -> Self {
        self.runs = runs;
        self
    }

    pub fn target(mut self, text: &str, met: bool) -> Self {
        self.target = Some(Target {
            text: text.to_string(),
            met,
        });
        self
    }
}

/// "met" / "**missed**" for a table.
pub fn met_word(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**missed**"
    }
}

impl Results {
    pub fn to_json(&self) -> Value {
        json!({
            "command": self.command,
            "quick": self.quick,
            "date_utc": self.date_utc,
            "revision": self.revision,
            "machine": {
                "cpu_model": self.machine.cpu_model,
                "cpus": self.machine.cpus,
                "kernel": self.machine.kernel,
                "os": self.machine.os,
                "mem_gib": self.machine.mem_gib,
            },
            "nice": self.nice,
            "duration_s": self.duration_s,
            "targets": self.targets().iter().map(|f| json!({
                "key": f.key,
                "label": f.label,
                "target": f.target.as_ref().map(|t| t.text.clone()),
                "value": f.value,
                "unit": f.unit,
                "met": f.target.as_ref().map(|t| t.met),
            })).collect::<Vec<_>>(),
            "sections": self.sections.iter().map(Section::to_json).collect::<Vec<_>>(),
        })
    }

    /// The figures that have a target, in section order.
    pub fn targets(&self) -> Vec<&Figure> {
        self.sections
            .iter()
            .flat_map(|s| s.figures.iter())
            .filter(|f| f.target.is_some())
            .collect()
    }

    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        md.push_str("# montrace benchmarks\n\n");
        md.push_str(
            "<!-- Written by `cargo xtask bench` (xtask/src/bench/): change the code, not this \
             file, and rerun. -->\n\n",
        );
        md.push_str(&format!(
            "Figures of one real run of `{}` on {} (revision `{}`), which took {:.0} s, on this \
             machine: {} × {}, {:.0} GiB of memory, Linux {} ({}). The same figures, with every \
             run's value, are in [bench/results.json](bench/results.json).\n\n",
            self.command,
            self.date_utc,
            self.revision,
            self.duration_s,
            self.machine.cpus,
            self.machine.cpu_model,
            self.machine.mem_gib,
            self.machine.kernel,
            self.machine.os,
        ));
        md.push_str(RERUN);
        md.push_str(
            "\nEvery figure is measured side by side in one run: with and without montrace (or \
             montrace and psrecord) alternate, run after run, and a time is the median of the \
             runs' ratios. Kernel figures come from the kernel itself, never from montrace: \
             processes from the PID counter of a PID namespace made for the run, CPU from \
             `getrusage`, peaks from `VmHWM` (see each section).",
        );
        if let Some(nice) = self.nice {
            md.push_str(&format!(
                " The benchmark, montrace and the workloads ran at nice {nice}, so that other \
                 work on the machine takes less of the CPUs from them."
            ));
        }
        md.push_str("\n\n");
        let mut groups: Vec<&str> = Vec::new();
        let mut busy: Vec<&str> = Vec::new();
        for s in &self.sections {
            if !groups.contains(&s.group) {
                groups.push(s.group);
            }
            if s.load.is_some_and(|l| l.busy()) && !busy.contains(&s.group) {
                busy.push(s.group);
            }
        }
        if !busy.is_empty() {
            md.push_str(&format!(
                "**Other work ran on the machine** (a 1-minute load average of 1 or more on \
                 {} cores) during {} of the {} groups of runs ({}). Times measured then are \
                 noisier than on an idle machine; each group of sections shows its load.\n\n",
                self.machine.cpus,
                busy.len(),
                groups.len(),
                busy.join(", ")
            ));
        }

        md.push_str("## Targets\n\n");
        let rows: Vec<Vec<String>> = self
            .targets()
            .iter()
            .map(|f| {
                let t = f.target.as_ref().expect("filtered on targets");
                vec![
                    f.label.clone(),
                    f.display.clone(),
                    t.text.clone(),
                    met_word(t.met).to_string(),
                ]
            })
            .collect();
        md.push_str(&markdown_table(
            &["target".into(), "measured".into(), "goal".into(), "".into()],
            &rows,
        ));
        md.push('\n');

        // Sections measured together share their load: say it once, after the last of them.
        for (i, s) in self.sections.iter().enumerate() {
            let next_load = self.sections.get(i + 1).and_then(|n| n.load);
            let last_of_group = match (s.load, next_load) {
                (Some(a), Some(b)) => a.before != b.before || a.after != b.after,
                _ => true,
            };
            md.push_str(&s.to_markdown(last_of_group));
        }
        md
    }
}

const RERUN: &str = concat!(
    "How to rerun (as root; the first run installs psrecord with pip):\n\n",
    "```\n",
    "cargo xtask bench --quick           # smaller sizes, fewer runs: under 8 minutes\n",
    "cargo xtask bench                   # the full suite: about 20 minutes\n",
    "cargo xtask bench --only overhead   # some groups (tree, overhead, agent, report, gate): prints\n",
    "                                    # them, leaves this file and bench/results.json alone\n",
    "```\n\n",
    "It builds `target/release/montrace` first (`--montrace PATH` takes another binary), and \
     writes this file and `bench/results.json`. Run it on an otherwise idle machine: other work \
     shows up in the times (each group of sections records the load average).\n",
);

impl Section {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "group": self.group,
            "title": self.title,
            "elapsed_s": self.elapsed_s,
            "load_before": self.load.map(|l| l.before.to_vec()),
            "load_after": self.load.map(|l| l.after.to_vec()),
            "figures": self.figures.iter().map(|f| json!({
                "key": f.key,
                "label": f.label,
                "unit": f.unit,
                "value": f.value,
                "runs": f.runs,
                "target": f.target.as_ref().map(|t| t.text.clone()),
                "met": f.target.as_ref().map(|t| t.met),
            })).collect::<Vec<_>>(),
            "table": {"columns": self.columns, "rows": self.rows},
        })
    }

    /// The section; with its load average and time when `with_load`.
    pub fn to_markdown(&self, with_load: bool) -> String {
        let mut md = format!("## {}\n\n", self.title);
        if !self.method.is_empty() {
            md.push_str(self.method.trim_end());
            md.push_str("\n\n");
        }
        md.push_str(&markdown_table(&self.columns, &self.rows));
        for note in &self.notes {
            md.push('\n');
            md.push_str(note.trim_end());
            md.push('\n');
        }
        if let Some(load) = self.load.filter(|_| with_load) {
            md.push_str(&format!(
                "\n_Load average (1/5/15 min) before: {:.2} / {:.2} / {:.2}, after: {:.2} / {:.2} / \
                 {:.2}; these runs took {:.0} s._\n",
                load.before[0],
                load.before[1],
                load.before[2],
                load.after[0],
                load.after[1],
                load.after[2],
                self.elapsed_s
            ));
        }
        md.push('\n');
        md
    }
}

/// A Markdown table; `|` in cells is escaped. Empty when there are no columns.
pub fn markdown_table(columns: &[String], rows: &[Vec<String>]) -> String {
    if columns.is_empty() {
        return String::new();
    }
    let cell = |c: &str| c.replace('|', "\\|");
    let mut md = format!(
        "| {} |\n|{}\n",
        columns
            .iter()
            .map(|c| cell(c))
            .collect::<Vec<_>>()
            .join(" | "),
        " --- |".repeat(columns.len())
    );
    for row in rows {
        let mut cells: Vec<String> = row.iter().map(|c| cell(c)).collect();
        cells.resize(columns.len(), String::new());
        md.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> Results {
        Results {
            command: "cargo xtask bench --quick".into(),
            quick: true,
            date_utc: "2024-05-01 12:00 UTC".into(),
            revision: "abc1234-dirty".into(),
            machine: Machine {
                cpu_model: "Test CPU".into(),
                cpus: 2,
                kernel: "6.1.0".into(),
                os: "Debian".into(),
                mem_gib: 8.0,
            },
            nice: Some(-10),
            duration_s: 100.0,
            sections: vec![Section {
                id: "overhead",
                group: "overhead",
                title: "3. Overhead".into(),
                method: "A/B.".into(),
                columns: vec!["workload".into(), "ratio".into()],
                rows: vec![vec!["a|b".into(), "1.010×".into()]],
                figures: vec![
                    Figure::new(
                        "overhead.build",
                        "build overhead",
                        "ratio",
                        Some(1.01),
                        "1.010×".into(),
                    )
                    .runs(vec![1.0, 1.01, 1.02])
                    .target("≤ 1.01×", true),
                    Figure::new("overhead.raw", "raw", "s", Some(2.0), "2 s".into()),
                ],
                notes: vec!["A note.".into()],
                load: Some(Load {
                    before: [1.5, 1.0, 0.5],
                    after: [0.2, 0.3, 0.4],
                }),
                elapsed_s: 12.0,
            }],
        }
    }

    #[test]
    fn markdown_has_targets_sections_and_rerun() {
        let md = results().to_markdown();
        assert!(
            md.contains("| build overhead | 1.010× | ≤ 1.01× | met |"),
            "{md}"
        );
        assert!(md.contains("## 3. Overhead"));
        assert!(md.contains("| a\\|b | 1.010× |"));
        assert!(md.contains("cargo xtask bench --quick"));
        assert!(md.contains("**Other work ran on the machine**"));
        assert!(
            md.contains("during 1 of the 1 groups of runs (overhead)"),
            "{md}"
        );
        assert!(
            !md.contains("| raw |"),
            "figures without a target stay out of the targets table"
        );
    }

    #[test]
    fn json_holds_every_run_and_the_targets() {
        let v = results().to_json();
        assert_eq!(v["targets"].as_array().unwrap().len(), 1);
        assert_eq!(v["targets"][0]["met"], true);
        assert_eq!(
            v["sections"][0]["figures"][0]["runs"],
            json!([1.0, 1.01, 1.02])
        );
        assert_eq!(v["sections"][0]["table"]["rows"][0][0], "a|b");
    }

    #[test]
    fn short_rows_are_padded() {
        let md = markdown_table(&["a".into(), "b".into()], &[vec!["1".into()]]);
        assert_eq!(md, "| a | b |\n| --- | --- |\n| 1 |  |\n");
    }
}
