//! The benchmark's results: a model, its JSON form (`bench/results.json`, read back by
//! [`Results::from_json`]) and its Markdown form (`BENCHMARKS.md`), and the merge of a few
//! groups measured again into the results of a whole run (`cargo xtask bench --only G --update`).

use anyhow::{anyhow, Context as _, Result};
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
    /// The `--update` runs since the whole run, oldest first: which groups each replaced.
    pub updates: Vec<Update>,
}

/// One `cargo xtask bench --only GROUP,... --update`: the groups it measured again.
#[derive(Clone, Debug, PartialEq)]
pub struct Update {
    pub command: String,
    pub date_utc: String,
    pub revision: String,
    pub groups: Vec<String>,
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
    pub id: String,
    /// The group it was measured in (`tree`, `overhead`, ...; see `cargo xtask bench --only`).
    pub group: String,
    /// When and at which revision it was measured (a section kept by `--update` keeps its own).
    pub date_utc: String,
    pub revision: String,
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

    /// Reads back a figure of [`Section::to_json`]. One written before figures kept their
    /// `display` shows its value and unit.
    fn from_json(v: &Value) -> Result<Figure> {
        let key = text(v, "key")?;
        let value = v["value"].as_f64();
        let unit = text(v, "unit")?;
        let display = optional_text(v, "display").unwrap_or_else(|| match value {
            Some(x) => format!("{x} {unit}"),
            None => "n/a".into(),
        });
        let runs = array(v, "runs")?
            .iter()
            .map(|r| {
                r.as_f64()
                    .ok_or_else(|| anyhow!("figure `{key}`: a run that is no number"))
            })
            .collect::<Result<Vec<_>>>()?;
        let target = match (v["target"].as_str(), v["met"].as_bool()) {
            (Some(text), Some(met)) => Some(Target {
                text: text.to_string(),
                met,
            }),
            _ => None,
        };
        Ok(Figure {
            label: text(v, "label")?,
            unit,
            value,
            runs,
            display,
            target,
            key,
        })
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
            "updates": self.updates.iter().map(|u| json!({
                "command": u.command,
                "date_utc": u.date_utc,
                "revision": u.revision,
                "groups": u.groups,
            })).collect::<Vec<_>>(),
        })
    }

    /// Reads back what [`Results::to_json`] wrote. A section without its own date and revision
    /// (written before sections had them) was measured by the whole run: it takes the run's.
    pub fn from_json(v: &Value) -> Result<Results> {
        let machine = &v["machine"];
        let date_utc = text(v, "date_utc")?;
        let revision = text(v, "revision")?;
        let sections = array(v, "sections")?
            .iter()
            .map(|s| Section::from_json(s, &date_utc, &revision))
            .collect::<Result<Vec<_>>>()?;
        let updates = match v.get("updates") {
            None | Some(Value::Null) => Vec::new(),
            Some(_) => array(v, "updates")?
                .iter()
                .map(|u| {
                    Ok(Update {
                        command: text(u, "command")?,
                        date_utc: text(u, "date_utc")?,
                        revision: text(u, "revision")?,
                        groups: strings(u, "groups")?,
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        };
        Ok(Results {
            command: text(v, "command")?,
            quick: v["quick"].as_bool().ok_or_else(|| anyhow!("no `quick`"))?,
            date_utc,
            revision,
            machine: Machine {
                cpu_model: text(machine, "cpu_model")?,
                cpus: number(machine, "cpus")? as usize,
                kernel: text(machine, "kernel")?,
                os: text(machine, "os")?,
                mem_gib: number(machine, "mem_gib")?,
            },
            nice: v["nice"].as_i64().map(|n| n as i32),
            duration_s: number(v, "duration_s")?,
            sections,
            updates,
        })
    }

    /// These results with the groups that `new` measured (`new.updates`' last entry names them)
    /// replaced by `new`'s sections, and those absent added, every section at its group's place
    /// in `order` (the groups of a whole run, in their order; a group not in it goes last). The
    /// rest is kept as it was: the whole run's header, and each kept section with its own date,
    /// revision, load and figures.
    pub fn merge(mut self, new: Results, order: &[&str]) -> Results {
        let replaced: Vec<String> = new
            .sections
            .iter()
            .map(|s| s.group.clone())
            .chain(new.updates.iter().flat_map(|u| u.groups.iter().cloned()))
            .collect();
        self.sections.retain(|s| !replaced.contains(&s.group));
        self.sections.extend(new.sections);
        let rank = |group: &str| {
            order
                .iter()
                .position(|g| *g == group)
                .unwrap_or(order.len())
        };
        // A stable sort: the sections of one group stay in the order they were measured in.
        self.sections.sort_by_key(|s| rank(&s.group));
        self.updates.extend(new.updates);
        self
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
        for u in &self.updates {
            let titles: Vec<String> = self
                .sections
                .iter()
                .filter(|s| u.groups.contains(&s.group) && s.revision == u.revision)
                .filter(|s| s.date_utc == u.date_utc)
                .map(|s| format!("\"{}\"", s.title))
                .collect();
            md.push_str(&format!(
                "Since then `{}` on {} (revision `{}`) measured again, and replaced, group{} {}: \
                 {}.\n\n",
                u.command,
                u.date_utc,
                u.revision,
                if u.groups.len() == 1 { "" } else { "s" },
                u.groups.join(", "),
                if titles.is_empty() {
                    "sections replaced again since".to_string()
                } else {
                    titles.join(", ")
                },
            ));
        }
        if !self.updates.is_empty() {
            md.push_str("Each section says when and at which revision it was measured.\n\n");
        }
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
            if !groups.contains(&s.group.as_str()) {
                groups.push(&s.group);
            }
            if s.load.is_some_and(|l| l.busy()) && !busy.contains(&s.group.as_str()) {
                busy.push(&s.group);
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
            let next_group = self.sections.get(i + 1).map(|n| n.group.as_str());
            let last_of_group = next_group != Some(s.group.as_str())
                || match (s.load, next_load) {
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
    "cargo xtask bench --only overhead   # some groups (tree, overhead, agent, report, gate, ...):\n",
    "                                    # prints them, leaves this file and bench/results.json alone\n",
    "cargo xtask bench --only resident --update\n",
    "                                    # measures those groups again and replaces their sections\n",
    "                                    # here and in bench/results.json, keeping the others\n",
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
            "date_utc": self.date_utc,
            "revision": self.revision,
            "method": self.method,
            "notes": self.notes,
            "elapsed_s": self.elapsed_s,
            "load_before": self.load.map(|l| l.before.to_vec()),
            "load_after": self.load.map(|l| l.after.to_vec()),
            "figures": self.figures.iter().map(|f| json!({
                "key": f.key,
                "label": f.label,
                "unit": f.unit,
                "value": f.value,
                "display": f.display,
                "runs": f.runs,
                "target": f.target.as_ref().map(|t| t.text.clone()),
                "met": f.target.as_ref().map(|t| t.met),
            })).collect::<Vec<_>>(),
            "table": {"columns": self.columns, "rows": self.rows},
        })
    }

    /// Reads back what [`Section::to_json`] wrote; `date_utc` and `revision` are the run's, for a
    /// section that has none of its own.
    fn from_json(v: &Value, date_utc: &str, revision: &str) -> Result<Section> {
        let id = text(v, "id")?;
        let within = |e: anyhow::Error| e.context(format!("section `{id}`"));
        let load = match (v.get("load_before"), v.get("load_after")) {
            (Some(b @ Value::Array(_)), Some(a @ Value::Array(_))) => Some(Load {
                before: three(b).map_err(within)?,
                after: three(a).map_err(within)?,
            }),
            _ => None,
        };
        let figures = array(v, "figures")
            .map_err(within)?
            .iter()
            .map(Figure::from_json)
            .collect::<Result<Vec<_>>>()
            .map_err(within)?;
        let table = &v["table"];
        let rows = array(table, "rows")
            .map_err(within)?
            .iter()
            .map(|r| {
                r.as_array()
                    .ok_or_else(|| anyhow!("a row that is not a list"))?
                    .iter()
                    .map(|c| c.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| anyhow!("a cell that is not text"))
            })
            .collect::<Result<Vec<_>>>()
            .map_err(within)?;
        Ok(Section {
            group: text(v, "group").map_err(within)?,
            title: text(v, "title").map_err(within)?,
            date_utc: optional_text(v, "date_utc").unwrap_or_else(|| date_utc.to_string()),
            revision: optional_text(v, "revision").unwrap_or_else(|| revision.to_string()),
            method: optional_text(v, "method").unwrap_or_default(),
            notes: match v.get("notes") {
                None | Some(Value::Null) => Vec::new(),
                Some(_) => strings(v, "notes").map_err(within)?,
            },
            columns: strings(table, "columns").map_err(within)?,
            rows,
            figures,
            load,
            elapsed_s: number(v, "elapsed_s").map_err(within)?,
            id,
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
                "\n_Measured on {} at revision `{}`. Load average (1/5/15 min) before: {:.2} / \
                 {:.2} / {:.2}, after: {:.2} / {:.2} / {:.2}; these runs took {:.0} s._\n",
                self.date_utc,
                self.revision,
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

fn text(v: &Value, key: &str) -> Result<String> {
    optional_text(v, key).with_context(|| format!("no text `{key}`"))
}

fn optional_text(v: &Value, key: &str) -> Option<String> {
    v.get(key)?.as_str().map(str::to_string)
}

fn number(v: &Value, key: &str) -> Result<f64> {
    v.get(key)
        .and_then(Value::as_f64)
        .with_context(|| format!("no number `{key}`"))
}

fn array<'a>(v: &'a Value, key: &str) -> Result<&'a Vec<Value>> {
    v.get(key)
        .and_then(Value::as_array)
        .with_context(|| format!("no list `{key}`"))
}

fn strings(v: &Value, key: &str) -> Result<Vec<String>> {
    array(v, key)?
        .iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
        .with_context(|| format!("`{key}` holds something that is not text"))
}

fn three(v: &Value) -> Result<[f64; 3]> {
    let xs: Vec<f64> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect();
    xs.try_into()
        .map_err(|_| anyhow!("a load average that is not 3 numbers"))
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
            updates: Vec::new(),
            sections: vec![Section {
                id: "overhead".into(),
                group: "overhead".into(),
                date_utc: "2024-05-01 12:00 UTC".into(),
                revision: "abc1234-dirty".into(),
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

    /// A section of `group` measured at `revision`, with one figure of `value`.
    fn section(id: &str, group: &str, revision: &str, value: f64) -> Section {
        Section {
            id: id.into(),
            group: group.into(),
            date_utc: format!("date of {revision}"),
            revision: revision.into(),
            title: format!("{id} title"),
            method: format!("{id} method"),
            columns: vec!["figure".into()],
            rows: vec![vec![format!("{value}")]],
            figures: vec![
                Figure::new(&format!("{id}.x"), "x", "s", Some(value), "x".into())
                    .runs(vec![value])
                    .target("< 1 s", value < 1.0),
            ],
            notes: vec![format!("{id} note")],
            // The sections of a group share its load.
            load: Some(Load {
                before: [group.len() as f64 / 10.0; 3],
                after: [0.1; 3],
            }),
            elapsed_s: value,
        }
    }

    fn update(groups: &[&str], revision: &str) -> Results {
        let mut r = results();
        r.command = format!("cargo xtask bench --only {} --update", groups.join(","));
        r.revision = revision.into();
        r.date_utc = format!("date of {revision}");
        r.updates = vec![Update {
            command: r.command.clone(),
            date_utc: r.date_utc.clone(),
            revision: revision.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }];
        r
    }

    const ORDER: [&str; 4] = ["tree", "overhead", "agent", "resident"];

    #[test]
    fn the_json_reads_back_into_the_same_json_and_markdown() {
        let mut r = results();
        r.sections.push(section("b", "agent", "def5678", 0.5));
        r.updates = update(&["agent"], "def5678").updates;
        let json = r.to_json();
        let back = Results::from_json(&json).unwrap();
        assert_eq!(back.to_json(), json);
        assert_eq!(back.to_markdown(), r.to_markdown());
    }

    #[test]
    fn a_section_without_its_own_date_takes_the_runs() {
        let mut json = results().to_json();
        let section = json["sections"][0].as_object_mut().unwrap();
        section.remove("date_utc");
        section.remove("revision");
        section.remove("method");
        section.remove("notes");
        json.as_object_mut().unwrap().remove("updates");
        let back = Results::from_json(&json).unwrap();
        assert_eq!(back.sections[0].date_utc, "2024-05-01 12:00 UTC");
        assert_eq!(back.sections[0].revision, "abc1234-dirty");
        assert_eq!(back.sections[0].method, "");
        assert!(back.updates.is_empty());
        let mut broken = results().to_json();
        broken["sections"][0]["figures"][0]["runs"] = json!(["one"]);
        let err = Results::from_json(&broken).err().unwrap();
        assert!(format!("{err:#}").contains("section `overhead`"), "{err:#}");
    }

    #[test]
    fn an_update_replaces_its_groups_and_keeps_the_others_as_they_were() {
        let mut old = results();
        old.sections = vec![
            section("t1", "tree", "old", 0.1),
            section("t2", "tree", "old", 0.2),
            section("o", "overhead", "old", 0.3),
            section("a", "agent", "old", 0.4),
        ];
        let old_json = old.to_json();
        let mut new = update(&["overhead", "resident"], "new");
        new.sections = vec![
            section("o", "overhead", "new", 2.0),
            section("e", "overhead", "new", 0.5),
            section("r", "resident", "new", 0.6),
        ];
        let merged = Results::from_json(&old_json).unwrap().merge(new, &ORDER);
        let ids: Vec<(&str, &str)> = merged
            .sections
            .iter()
            .map(|s| (s.id.as_str(), s.revision.as_str()))
            .collect();
        assert_eq!(
            ids,
            [
                ("t1", "old"),
                ("t2", "old"),
                ("o", "new"),
                ("e", "new"),
                ("a", "old"),
                ("r", "new")
            ]
        );
        // The whole run's header stays; the kept sections are byte for byte what they were.
        assert_eq!(merged.revision, "abc1234-dirty");
        assert_eq!(merged.command, "cargo xtask bench --quick");
        for (i, j) in [(0, 0), (1, 1), (4, 3)] {
            assert_eq!(
                merged.sections[i].to_json(),
                old_json["sections"][j],
                "section {i}"
            );
        }
        assert_eq!(merged.updates.len(), 1);
        let targets: Vec<&str> = merged.targets().iter().map(|f| f.key.as_str()).collect();
        assert_eq!(targets, ["t1.x", "t2.x", "o.x", "e.x", "a.x", "r.x"]);
        let md = merged.to_markdown();
        assert!(
            md.contains(
                "Since then `cargo xtask bench --only overhead,resident --update` on date of new \
                 (revision `new`) measured again, and replaced, groups overhead, resident: \
                 \"o title\", \"e title\", \"r title\"."
            ),
            "{md}"
        );
        assert!(
            md.contains("_Measured on date of old at revision `old`."),
            "{md}"
        );
        assert!(
            md.contains("_Measured on date of new at revision `new`."),
            "{md}"
        );
        // Each group says its load once, after its last section.
        assert_eq!(md.matches("_Measured on").count(), 4, "{md}");
        assert!(md.contains("| x | x | < 1 s | **missed** |"), "{md}");
    }

    #[test]
    fn a_second_update_of_a_group_replaces_the_first() {
        let mut old = results();
        old.sections = vec![section("a", "agent", "old", 0.4)];
        let mut first = update(&["resident"], "one");
        first.sections = vec![section("r", "resident", "one", 0.5)];
        let mut second = update(&["resident"], "two");
        second.sections = vec![section("r", "resident", "two", 0.7)];
        let merged = old.merge(first, &ORDER).merge(second, &ORDER);
        let ids: Vec<(&str, &str)> = merged
            .sections
            .iter()
            .map(|s| (s.id.as_str(), s.revision.as_str()))
            .collect();
        assert_eq!(ids, [("a", "old"), ("r", "two")]);
        assert_eq!(merged.updates.len(), 2);
        let md = merged.to_markdown();
        assert!(
            md.contains("group resident: sections replaced again since."),
            "{md}"
        );
        assert!(md.contains("group resident: \"r title\"."), "{md}");
    }

    #[test]
    fn short_rows_are_padded() {
        let md = markdown_table(&["a".into(), "b".into()], &[vec!["1".into()]]);
        assert_eq!(md, "| a | b |\n| --- | --- |\n| 1 |  |\n");
    }
}
