//! Test support: docs/schema.md must document every field montrace writes into run.json and
//! summary.json, so the docs cannot drift from the types again.
//!
//! A field counts as documented only where the page's field tables (the tables under
//! `## run.json` and `## summary.json` whose first header cell is `field`) document it: its name,
//! backticked, in the first cell of a row (nested fields by their dotted path,
//! `lost_events.ringbuf_full`, array elements as `[]`, `repetitions[].other_cpu_share`), or,
//! for a nested field without a row of its own, backticked in the row of its nearest documented
//! ancestor (`totals` names `cpu_user_ns`), together with every object between them
//! (`context` names `git` and `commit`). A row that says `as in `run.json`` hands what it does
//! not name itself to run.json's row of the same field. A name elsewhere on the page (a column
//! of `samples.parquet`, a query) does not count.
use std::collections::BTreeMap;

/// docs/schema.md.
pub fn schema_doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schema.md");
    std::fs::read_to_string(path).expect("reading docs/schema.md")
}

/// The field rows of one file's section of the page (`## run.json`): each name in a row's first
/// cell, to the rest of the row.
pub fn field_rows(doc: &str, file: &str) -> BTreeMap<String, String> {
    let heading = format!("## {file}");
    let mut rows = BTreeMap::new();
    let mut in_section = false;
    let mut in_field_table = false;
    for line in doc.lines() {
        if line.starts_with("## ") {
            in_section = line.trim_end() == heading;
            in_field_table = false;
            continue;
        }
        if !in_section {
            continue;
        }
        let Some(row) = line.strip_prefix('|') else {
            in_field_table = false;
            continue;
        };
        let (first, rest) = row.split_once('|').unwrap_or((row, ""));
        if first.trim() == "field" {
            in_field_table = true;
            continue;
        }
        if !in_field_table || first.trim_start().starts_with("---") {
            continue;
        }
        for name in code_spans(first) {
            rows.insert(name.to_string(), rest.to_string());
        }
    }
    rows
}

/// The `code spans` of `text`.
fn code_spans(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// Whether `text` names `name` as a code span of its own (`name`, or `"name"` for a value).
fn names(text: &str, name: &str) -> bool {
    code_spans(text).any(|span| span == name || span == format!("\"{name}\""))
}

/// One serialized field: its path from the top (`gpu.devices[].index`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldPath(pub Vec<String>);

impl FieldPath {
    pub fn dotted(&self) -> String {
        self.0.join(".")
    }
}

/// Every field path in `value`. `maps` are the paths of objects whose keys are data (label
/// names, metric names), not fields: their keys become `*`.
pub fn field_paths(value: &serde_json::Value, maps: &[&str]) -> Vec<FieldPath> {
    fn walk(
        v: &serde_json::Value,
        path: &mut Vec<String>,
        maps: &[&str],
        out: &mut Vec<FieldPath>,
    ) {
        match v {
            serde_json::Value::Object(map) => {
                let is_map = maps.contains(&path.join(".").as_str());
                for (k, v) in map {
                    path.push(if is_map { "*".to_string() } else { k.clone() });
                    if !is_map {
                        out.push(FieldPath(path.clone()));
                    }
                    walk(v, path, maps, out);
                    path.pop();
                }
            }
            serde_json::Value::Array(items) => {
                if let Some(last) = path.last_mut() {
                    if !last.ends_with("[]") {
                        last.push_str("[]");
                    }
                }
                for item in items {
                    walk(item, path, maps, out);
                }
                if let Some(last) = path.last_mut() {
                    if let Some(stripped) = last.strip_suffix("[]") {
                        *last = stripped.to_string();
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, &mut Vec::new(), maps, &mut out);
    out.sort();
    out.dedup();
    out
}

/// The row that documents `path` in `file`'s tables and the names below it that row must
/// mention, or None when no ancestor has a row.
fn documenting_row<'a>(
    rows: &'a BTreeMap<String, BTreeMap<String, String>>,
    file: &str,
    path: &[String],
) -> Option<(&'a str, Vec<String>)> {
    let table = rows.get(file)?;
    for len in (1..=path.len()).rev() {
        // A row may name an array field with or without its `[]`.
        let exact = path[..len].join(".");
        let bare = exact.strip_suffix("[]").unwrap_or(&exact).to_string();
        if let Some(row) = table.get(&exact).or_else(|| table.get(&bare)) {
            let below: Vec<String> = path[len..]
                .iter()
                .map(|k| k.trim_end_matches("[]").to_string())
                .filter(|k| k != "*")
                .collect();
            return Some((row.as_str(), below));
        }
    }
    None
}

/// Why `path` of `file` is not documented, or None when it is.
fn undocumented(
    rows: &BTreeMap<String, BTreeMap<String, String>>,
    file: &str,
    path: &[String],
) -> Option<String> {
    let Some((row, below)) = documenting_row(rows, file, path) else {
        return Some("no row for it or for an object it is in".into());
    };
    let unnamed: Vec<&String> = below.iter().filter(|k| !names(row, k)).collect();
    if unnamed.is_empty() {
        return None;
    }
    use crate::store::run_json::RUN_JSON_FILE;
    if file != RUN_JSON_FILE && row.contains("as in `run.json`") {
        return undocumented(rows, RUN_JSON_FILE, path);
    }
    Some(format!(
        "its row (or its object's) does not name {unnamed:?}"
    ))
}

/// The field rows of run.json and summary.json.
fn all_rows() -> BTreeMap<String, BTreeMap<String, String>> {
    let doc = schema_doc();
    [
        crate::store::run_json::RUN_JSON_FILE,
        crate::store::summary_json::SUMMARY_FILE,
    ]
    .into_iter()
    .map(|f| (f.to_string(), field_rows(&doc, f)))
    .collect()
}

/// Panics with every field of `value` (a serialized `file`) that docs/schema.md's field tables
/// do not document; `maps` as in [`field_paths`].
pub fn assert_documented(file: &str, value: &serde_json::Value, maps: &[&str]) {
    let rows = all_rows();
    let missing: Vec<String> = field_paths(value, maps)
        .into_iter()
        .filter_map(|p| undocumented(&rows, file, &p.0).map(|why| format!("{}: {why}", p.dotted())))
        .collect();
    assert!(
        missing.is_empty(),
        "{file} fields missing from docs/schema.md's {file} table:\n{}",
        missing.join("\n")
    );
}

/// Panics unless the row documenting `field` (a dotted path) names every one of `values`, the
/// values an enum serializes to.
pub fn assert_values_documented(file: &str, field: &str, values: &[serde_json::Value]) {
    let rows = all_rows();
    let path: Vec<String> = field.split('.').map(String::from).collect();
    let (row, _) = documenting_row(&rows, file, &path)
        .unwrap_or_else(|| panic!("{file} `{field}` has no row in docs/schema.md"));
    let missing: Vec<&str> = values
        .iter()
        .map(|v| v.as_str().expect("an enum serialized as a string"))
        .filter(|v| !names(row, v))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/schema.md's {file} row for `{field}` does not name the values {missing:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "\
## run.json

| field | type | meaning |
| --- | --- | --- |
| `totals` | object | sums: `cpu_user_ns` and `read_bytes` |
| `lost_events.ringbuf_full` | integer | dropped |
| `mode` | string | `\"polling\"` or `tp_btf` |

Also `samples` and `other` in prose.

| column | type |
| --- | --- |
| `samples` | x |

## summary.json

| field | type | meaning |
| --- | --- | --- |
| `limit_breach` | object | as in `run.json` |
| `labels`, `context` | object | named |
";

    fn rows() -> BTreeMap<String, BTreeMap<String, String>> {
        ["run.json", "summary.json"]
            .into_iter()
            .map(|f| (f.to_string(), field_rows(DOC, f)))
            .collect()
    }

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(String::from).collect()
    }

    #[test]
    fn only_field_table_rows_document() {
        let rows = rows();
        assert_eq!(undocumented(&rows, "run.json", &path("totals")), None);
        assert_eq!(
            undocumented(&rows, "run.json", &path("totals.cpu_user_ns")),
            None
        );
        assert_eq!(
            undocumented(&rows, "run.json", &path("lost_events.ringbuf_full")),
            None
        );
        // In prose and in a column table, not in a field row.
        assert!(undocumented(&rows, "run.json", &path("samples")).is_some());
        // A nested field its parent's row does not name.
        assert!(undocumented(&rows, "run.json", &path("totals.write_bytes")).is_some());
        // A parent with no row of its own.
        assert!(undocumented(&rows, "run.json", &path("lost_events")).is_some());
        // Both names of a shared row; a row handing its fields to run.json's.
        assert_eq!(undocumented(&rows, "summary.json", &path("context")), None);
        assert!(undocumented(&rows, "summary.json", &path("limit_breach.limit")).is_some());
        assert!(undocumented(&rows, "summary.json", &path("totals")).is_some());
    }

    #[test]
    fn paths_mark_arrays_and_hide_map_keys() {
        let v = serde_json::json!({
            "a": [{"b": 1}, {"c": 2}],
            "labels": {"user_key": "x"},
            "stats": {"wall_s": {"n": 1}},
        });
        let paths: Vec<String> = field_paths(&v, &["labels", "stats"])
            .iter()
            .map(FieldPath::dotted)
            .collect();
        assert_eq!(
            paths,
            ["a", "a[].b", "a[].c", "labels", "stats", "stats.*.n"]
        );
    }

    #[test]
    fn values_are_named_quoted_or_bare() {
        let rows = rows();
        let row = &rows["run.json"]["mode"];
        assert!(names(row, "polling") && names(row, "tp_btf"));
        assert!(!names(row, "tracepoint") && !names(row, "poll"));
    }
}
