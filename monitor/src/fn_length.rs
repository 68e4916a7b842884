//! No function over 120 lines outside tests (issue 30): a long function is several steps without
//! names, and the reader has to find where one ends. This test reads the crate's source as text
//! (no parser: comments, strings and char literals are blanked, then braces are matched), prints
//! the longest functions and fails naming `file:line` for one over [`MAX_LINES`].
//!
//! Test code is not measured: `#[cfg(test)]` and `#[test]` items, the files of modules declared
//! under `#[cfg(test)]`, and files named `tests.rs`.
//!
//! The same file is the check of the xtask crate (`xtask/src/main.rs` includes it by path):
//! each crate scans its own `src/` (`CARGO_MANIFEST_DIR`), and [`ALLOWED`] names the crate.
//!
//! What is still over the limit is in [`ALLOWED`], each with why; the test fails when an entry
//! there is no longer over, so the list can only shrink.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The most lines a non-test function may span, from its `fn` line to its closing brace.
const MAX_LINES: usize = 120;

/// Functions still over [`MAX_LINES`]: (`crate:file under src/:function`, why).
const ALLOWED: &[(&str, &str)] = &[];

/// A function found in the source: its name, first line (1-based) and lines spanned.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

/// `text` with comments, string literals and char literals replaced by spaces, newlines kept:
/// what is left has only the braces of the code.
fn blank(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = chars.clone();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let wipe = |from: usize, to: usize, out: &mut Vec<char>| {
        for c in out.iter_mut().take(to.min(chars.len())).skip(from) {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let prev = if i > 0 { chars[i - 1] } else { ' ' };
        if c == '/' && at(i + 1) == '/' {
            let end = (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len());
            wipe(i, end, &mut out);
            i = end;
        } else if c == '/' && at(i + 1) == '*' {
            // Block comments nest in Rust.
            let (mut depth, mut j) = (1, i + 2);
            while j < chars.len() && depth > 0 {
                if chars[j] == '/' && at(j + 1) == '*' {
                    depth += 1;
                    j += 1;
                } else if chars[j] == '*' && at(j + 1) == '/' {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            wipe(i, j, &mut out);
            i = j;
        } else if c == 'r' && (!is_ident(prev) || prev == 'b') && matches!(at(i + 1), '"' | '#') {
            // A raw string r"..." or r#"..."# (br too); `r#ident` is a raw identifier.
            let hashes = (i + 1..chars.len())
                .take_while(|&j| chars[j] == '#')
                .count();
            if at(i + 1 + hashes) != '"' {
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body = i + 2 + hashes;
            let rest: String = chars[body..].iter().collect();
            let end = rest.find(&close).map_or(chars.len(), |n| {
                body + rest[..n].chars().count() + close.len()
            });
            wipe(i, end, &mut out);
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            wipe(i, j + 1, &mut out);
            i = j + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{7b}', '{') or a lifetime / label ('a, 'outer:).
            if at(i + 1) == '\\' {
                let end = (i + 3..chars.len())
                    .find(|&j| chars[j] == '\'')
                    .unwrap_or(chars.len());
                wipe(i, end + 1, &mut out);
                i = end + 1;
            } else if at(i + 2) == '\'' {
                wipe(i, i + 3, &mut out);
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// The end (exclusive, a char index) of the item starting at `from`: its first `;` outside
/// brackets, or the brace that closes its first `{`.
fn item_end(code: &[char], from: usize) -> usize {
    let mut depth = 0i32;
    let mut i = from;
    while i < code.len() {
        match code[i] {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ';' if depth == 0 => return i + 1,
            '{' if depth == 0 => return matching_brace(code, i) + 1,
            _ => {}
        }
        i += 1;
    }
    code.len()
}

/// The index of the `}` closing the `{` at `open` (the end of the code when unmatched).
fn matching_brace(code: &[char], open: usize) -> usize {
    let mut depth = 0;
    for (i, &c) in code.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The blanked code with its test items (`#[cfg(test)]`, `#[test]`, and the attributes after
/// them) blanked as well, and the names of the modules declared test-only without a body.
fn without_tests(code: &str) -> (String, Vec<String>) {
    let mut chars: Vec<char> = code.chars().collect();
    let mut test_mods = Vec::new();
    let text: String = chars.iter().collect();
    let mut starts = Vec::new();
    for marker in ["#[cfg(test)]", "#[test]"] {
        let mut search = 0;
        while let Some(found) = text[search..].find(marker) {
            starts.push(text[..search + found].chars().count());
            search += found + marker.len();
        }
    }
    starts.sort_unstable();
    for start in starts {
        if chars[start] == ' ' {
            continue; // inside an item already blanked
        }
        // Skip this and any further attributes, then the item itself.
        let mut i = start;
        loop {
            while i < chars.len() && chars[i].is_whitespace() {
                i += 1;
            }
            if chars.get(i) == Some(&'#') {
                i = (i..chars.len())
                    .find(|&j| chars[j] == ']')
                    .map_or(chars.len(), |j| j + 1);
            } else {
                break;
            }
        }
        let end = item_end(&chars, i);
        let item: String = chars[i..end].iter().collect();
        let decl = item
            .trim()
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        if let Some(name) = decl.strip_prefix("mod ").and_then(|d| d.strip_suffix(';')) {
            test_mods.push(name.trim().to_string());
        }
        for c in chars.iter_mut().take(end).skip(start) {
            if *c != '\n' {
                *c = ' ';
            }
        }
    }
    (chars.into_iter().collect(), test_mods)
}

/// The functions with a body in a file's non-test code (nested ones too), and the modules it
/// declares test-only (`#[cfg(test)] mod fake;`).
fn functions(text: &str) -> (Vec<Function>, Vec<String>) {
    let (code, test_mods) = without_tests(&blank(text));
    let chars: Vec<char> = code.chars().collect();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let line_of = |at: usize| chars[..at].iter().filter(|&&c| c == '\n').count() + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 < chars.len() {
        let starts_fn = chars[i] == 'f'
            && chars[i + 1] == 'n'
            && chars[i + 2].is_whitespace()
            && (i == 0 || !is_ident(chars[i - 1]));
        if !starts_fn {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        let name: String = chars[j..].iter().take_while(|&&c| is_ident(c)).collect();
        if name.is_empty() {
            i += 2; // `fn(u32) -> u32`, a `$name` in a macro
            continue;
        }
        let end = item_end(&chars, j);
        if chars.get(end - 1) == Some(&'}') {
            let (first, last) = (line_of(i), line_of(end - 1));
            out.push(Function {
                name,
                line: first,
                lines: last - first + 1,
            });
        }
        i = j; // nested functions are measured as well
    }
    (out, test_mods)
}

/// Every .rs file under `dir` (also the import check's, `layers`).
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The non-test functions of the crate under `src`: (file under src, function), longest first.
fn crate_functions(src: &Path) -> Vec<(String, Function)> {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    paths.sort();
    let mut test_only = BTreeSet::new();
    let mut found = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap();
        let (fns, test_mods) = functions(&text);
        let dir = if path
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == "lib.rs" || n == "main.rs")
        {
            path.parent().unwrap().to_path_buf()
        } else {
            path.with_extension("")
        };
        for name in test_mods {
            test_only.insert(dir.join(format!("{name}.rs")));
            test_only.insert(dir.join(&name).join("mod.rs"));
        }
        found.push((path.clone(), fns));
    }
    let mut out = Vec::new();
    for (path, fns) in found {
        // A test-only module's own submodules are test code too.
        let in_test = test_only
            .iter()
            .any(|t| path == *t || path.starts_with(t.with_extension("")));
        if in_test || path.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let rel = path.strip_prefix(src).unwrap().display().to_string();
        out.extend(fns.into_iter().map(|f| (rel.clone(), f)));
    }
    out.sort_by(|a, b| b.1.lines.cmp(&a.1.lines).then(a.0.cmp(&b.0)));
    out
}

#[test]
fn no_function_outside_tests_is_over_120_lines() {
    let krate = env!("CARGO_PKG_NAME");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let all = crate_functions(&src);
    eprintln!("the longest functions of {krate} (the limit is {MAX_LINES} lines):");
    for (file, f) in all.iter().take(10) {
        eprintln!("  {:4} {file}:{} {}", f.lines, f.line, f.name);
    }
    let key = |file: &str, f: &Function| format!("{krate}:{file}:{}", f.name);
    let allowed: Vec<_> = ALLOWED
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{krate}:")))
        .collect();
    eprintln!("still allowed over the limit (the list can only shrink):");
    for (k, why) in &allowed {
        eprintln!("  {k}: {why}");
    }
    let over: Vec<_> = all.iter().filter(|(_, f)| f.lines > MAX_LINES).collect();
    let unexcused: Vec<String> = over
        .iter()
        .filter(|(file, f)| !allowed.iter().any(|(k, _)| *k == key(file, f)))
        .map(|(file, f)| format!("{file}:{} {} ({} lines)", f.line, f.name, f.lines))
        .collect();
    assert!(
        unexcused.is_empty(),
        "functions over {MAX_LINES} lines (split them into named steps):\n{}",
        unexcused.join("\n")
    );
    let gone: Vec<_> = allowed
        .iter()
        .filter(|(k, _)| !over.iter().any(|(file, f)| *k == key(file, f)))
        .map(|(k, _)| k)
        .collect();
    assert!(
        gone.is_empty(),
        "allowed long functions that are no longer over {MAX_LINES} lines: take them out of ALLOWED: {gone:?}"
    );
}

#[test]
fn functions_are_measured_from_fn_to_closing_brace_past_strings_and_comments() {
    let text = "pub(crate) async fn a(x: u8) -> Result<(), E>\nwhere E: Debug,\n{\n    \
                let s = \"}}\"; // }\n    let c = '{';\n    let r = r#\"\"}\"#;\n    /* { /* } */ */\n    \
                fn inner<'a>(y: &'a str) -> &'a str { y }\n}\n\
                trait T { fn decl(&self); fn provided(&self) {\n} }\n\
                type F = fn(u32) -> u32;\n";
    let (fns, _) = functions(text);
    let got: Vec<(&str, usize, usize)> = fns
        .iter()
        .map(|f| (f.name.as_str(), f.line, f.lines))
        .collect();
    assert_eq!(got, [("a", 1, 9), ("inner", 8, 1), ("provided", 10, 2)]);
}

#[test]
fn test_items_and_test_modules_are_not_measured() {
    let text = "fn kept() {\n}\n#[cfg(test)]\nmod fake;\n#[cfg(test)]\n#[allow(dead_code)]\n\
                fn helper() {\n    let s = \"#[test]\";\n}\n#[test]\nfn t() {}\n\
                #[cfg(test)]\nmod tests {\n    fn inside() {}\n}\nfn after() {}\n";
    let (fns, test_mods) = functions(text);
    let got: Vec<(&str, usize)> = fns.iter().map(|f| (f.name.as_str(), f.line)).collect();
    assert_eq!(got, [("kept", 1), ("after", 16)]);
    assert_eq!(test_mods, ["fake"]);
}
