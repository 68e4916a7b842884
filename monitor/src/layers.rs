//! No import runs upward: the stage folders of `monitor/src` form layers, and a module may use
//! its own layer and the layers below it, never one above. This test reads every `crate::` path
//! of the non-test code (`use` lines, inline paths, `crate::say!` macros, serde's string paths)
//! and fails on an upward one, naming the file and line.
//!
//! The layers, bottom to top (issue 30; the anchors' shape in shared/STYLE.md: a bottom
//! vocabulary that uses nothing, stages above it, thin commands on top):
//!
//! ```text
//!  8  commands   cli, commands, run, attach,     the command line, each subcommand's entry
//!                doctor                          point (`commands/`), and what run, attach and
//!                                                doctor do
//!  7  follow     follow                          one recording: launch, follow, record, end
//!  6  analysis   analysis                        pure figures over recorded runs: critical path,
//!                                                report, compare, export, bench
//!  5  fleet      fleet                           where a run came from, exporters, datasets
//!  4  tracking   tracking                        the process tree (kernel events, /proc polling)
//!  3  sampling   sampling                        /proc, cgroups, GPUs, host facts
//!  2  kernel     kernel                          the eBPF programs: load, attach, decode
//!  1  store      store                           the vocabulary (store::model) and the run's files
//!  0  base       units, term, exit_code, host    formatting, terminal output, exit statuses,
//!                                                the clocks and the host's facts
//! ```
//!
//! `follow` sits above `analysis` because it computes the critical path while recording and
//! writes the report at the end; `analysis` never records.
//!
//! What still runs upward is in [`ALLOWED`], each edge with why; the test fails when an edge
//! there no longer occurs, so the list can only shrink. It prints the list on every run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of the crate and its layer (higher uses lower).
const LAYERS: &[(&str, u8)] = &[
    ("units", 0),
    ("term", 0),
    ("exit_code", 0),
    ("host", 0),
    ("store", 1),
    ("kernel", 2),
    ("sampling", 3),
    ("tracking", 4),
    ("fleet", 5),
    ("analysis", 6),
    ("follow", 7),
    ("cli", 8),
    ("commands", 8),
    ("agent", 7),
    ("run", 8),
    ("attach", 8),
    ("doctor", 8),
];

/// The upward edges left (from, to, why). Remove an entry when its edge is gone: the test says so.
/// None is left: analysis took cli's types until it had options of its own
/// (`compare::CompareOptions`, `bench::BenchOptions`, the formats `CompareFormat` and
/// `ReportFormat`, which cli re-exports), made from the command line by `commands/`.
const ALLOWED: &[(&str, &str, &str)] = &[];
fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

/// The files of modules declared under `#[cfg(test)]` (`mod tests;`, `mod fake;`): test code.
fn test_only_files(files: &[(PathBuf, String)]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for (path, text) in files {
        let dir = if path
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
        {
            path.parent().unwrap().to_path_buf()
        } else {
            path.with_extension("")
        };
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            if pair[0] != "#[cfg(test)]" {
                continue;
            }
            let decl = pair[1]
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) {
                out.insert(dir.join(format!("{name}.rs")));
                out.insert(dir.join(name).join("mod.rs"));
            }
        }
    }
    out
}

/// The non-test code of a file: up to its inline `#[cfg(test)] mod tests {`, `//` comments
/// blanked (line numbers kept).
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .get(i + 1)
                .is_some_and(|next| next.contains("mod tests {"))
        {
            break;
        }
        let kept = match line.find("//") {
            // A `//` inside a string ("http://...") is kept: crate paths never follow one there.
            Some(at) if line[..at].matches('"').count() % 2 == 0 => &line[..at],
            _ => line,
        };
        code.push_str(kept);
        code.push('\n');
    }
    code
}

/// The top-level names a piece of code reaches through `crate::`, with their line numbers:
/// `crate::a::b`, `crate::{a::b, c}` (each item of the group), `crate::mac!` (as the name).
fn crate_paths(code: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let ident = |from: usize| -> &str {
        let end = code[from..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(code.len(), |n| from + n);
        &code[from..end]
    };
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut search = 0;
    while let Some(found) = code[search..].find("crate::") {
        let at = search + found;
        search = at + "crate::".len();
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || b"_$".contains(&bytes[at - 1])) {
            continue; // `$crate::` or `foocrate::`
        }
        if bytes.get(search) == Some(&b'{') {
            // The group's items at depth one: `a::b`, `c::{d, e}`, `f`.
            let (mut depth, mut start, mut i) = (0, search + 1, search);
            while i < bytes.len() {
                match bytes[i] {
                    b'{' => depth += 1,
                    b'}' | b',' if depth == 1 => {
                        let item = code[start..i].trim_start();
                        let skipped = i - start - item.len();
                        let name = ident(start + skipped);
                        if !name.is_empty() {
                            out.push((name.to_string(), line_of(start + skipped)));
                        }
                        start = i + 1;
                        if bytes[i] == b'}' {
                            break;
                        }
                    }
                    b'}' => depth -= 1,
                    _ => {}
                }
                i += 1;
            }
        } else {
            let name = ident(search);
            if !name.is_empty() {
                out.push((name.to_string(), line_of(at)));
            }
        }
    }
    out
}

/// `#[macro_export]` macros by name, with the top-level module that defines them.
fn exported_macros(files: &[(String, String)]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (module, text) in files {
        for rest in text.split("macro_rules! ").skip(1) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name, module.clone());
        }
    }
    out
}

/// An import from one top-level module to another: (from, to) -> where.
type Edges = BTreeMap<(String, String), Vec<String>>;

fn import_edges(src: &Path) -> Edges {
    let mut paths = Vec::new();
    crate::fn_length::rust_files(src, &mut paths);
    paths.sort();
    let files: Vec<(PathBuf, String)> = paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect();
    let test_only = test_only_files(&files);
    let top = |path: &Path| -> String {
        let rel = path.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        first.trim_end_matches(".rs").to_string()
    };
    let macros = exported_macros(
        &files
            .iter()
            .map(|(p, t)| (top(p), t.clone()))
            .collect::<Vec<_>>(),
    );
    let mut edges = Edges::new();
    for (path, text) in &files {
        let from = top(path);
        let name = path.file_name().unwrap();
        if from == "main" || from == "lib" || name == "tests.rs" || test_only.contains(path) {
            continue;
        }
        for (to, line) in crate_paths(&code_of(text)) {
            let to = macros.get(&to).cloned().unwrap_or(to);
            if to != from {
                let at = format!("{}:{line}", path.strip_prefix(src).unwrap().display());
                edges.entry((from.clone(), to)).or_default().push(at);
            }
        }
    }
    edges
}

#[test]
fn no_import_runs_upward_between_the_stage_folders() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = import_edges(&src);
    let mut unplaced = BTreeSet::new();
    let mut upward = Vec::new();
    let mut allowed_seen = BTreeSet::new();
    for ((from, to), at) in &edges {
        let (Some(l_from), Some(l_to)) = (layer(from), layer(to)) else {
            unplaced.extend([from, to].into_iter().filter(|m| layer(m).is_none()));
            continue;
        };
        if l_to <= l_from {
            continue;
        }
        if ALLOWED.iter().any(|(f, t, _)| f == from && t == to) {
            allowed_seen.insert((from.as_str(), to.as_str()));
        } else {
            upward.push(format!("{from} -> {to} (layer {l_from} -> {l_to}): {at:?}"));
        }
    }
    eprintln!("the import graph (module [layer] -> what it uses; ^ marks an upward edge):");
    let mut graph: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        let up = matches!((layer(from), layer(to)), (Some(f), Some(t)) if t > f);
        let mark = if up { "^" } else { "" };
        graph.entry(from).or_default().push(format!("{to}{mark}"));
    }
    let mut modules: Vec<_> = graph.into_iter().collect();
    modules.sort_by_key(|(m, _)| (layer(m), *m));
    for (from, to) in modules {
        let l = layer(from).map_or("?".to_string(), |l| l.to_string());
        eprintln!("  {from} [{l}] -> {}", to.join(", "));
    }
    eprintln!("upward imports still allowed (the list can only shrink):");
    for (from, to, why) in ALLOWED {
        let at = edges
            .get(&(from.to_string(), to.to_string()))
            .map(Vec::len)
            .unwrap_or(0);
        eprintln!("  {from} -> {to} ({at} places): {why}");
    }
    assert!(
        unplaced.is_empty(),
        "modules in no layer: {unplaced:?}; give each a place in LAYERS (monitor/src/layers.rs)"
    );
    assert!(
        upward.is_empty(),
        "imports that run upward (move the shared type down, e.g. into store::model):\n{}",
        upward.join("\n")
    );
    let gone: Vec<_> = ALLOWED
        .iter()
        .filter(|(f, t, _)| !allowed_seen.contains(&(*f, *t)))
        .collect();
    assert!(
        gone.is_empty(),
        "allowed upward imports that no longer occur: take them out of ALLOWED: {gone:?}"
    );
}

#[test]
fn crate_paths_are_found_in_use_groups_inline_paths_and_macros() {
    let code = code_of(
        "use crate::{\n    a::b,\n    c::{d, e},\n    f,\n};\n\
         fn x() -> crate::g::H { crate::say!(\"http://x\"); $crate::no::Thing }\n\
         // crate::commented::Out\n\
         #[serde(default = \"crate::h::I::new\")]\n\
         #[cfg(test)]\nmod tests {\n    use crate::tests_only::X;\n}\n",
    );
    let found: Vec<(String, usize)> = crate_paths(&code);
    let names: Vec<(&str, usize)> = found.iter().map(|(n, l)| (n.as_str(), *l)).collect();
    assert_eq!(
        names,
        [("a", 2), ("c", 3), ("f", 4), ("g", 6), ("say", 6), ("h", 8)]
    );
}
