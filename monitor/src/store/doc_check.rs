//! Test support: docs/schema.md must name every field montrace writes into run.json and
//! summary.json, so the docs cannot drift from the types again.
use std::collections::BTreeSet;

/// docs/schema.md.
pub fn schema_doc() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schema.md");
    std::fs::read_to_string(path).expect("reading docs/schema.md")
}

/// Every identifier inside a `code span` of `doc` (`lost_events.ringbuf_full` gives both).
pub fn documented_words(doc: &str) -> BTreeSet<String> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|span| span.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| !w.is_empty())
        .map(String::from)
        .collect()
}

/// Every object key in `value`, at any depth (inside arrays too).
pub fn json_keys(value: &serde_json::Value) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    keys.insert(k.clone());
                    stack.push(v);
                }
            }
            serde_json::Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    keys
}

/// Panics with the list of the keys of `value` that docs/schema.md does not name.
pub fn assert_documented(file: &str, value: &serde_json::Value) {
    let words = documented_words(&schema_doc());
    let missing: Vec<String> = json_keys(value)
        .into_iter()
        .filter(|k| !words.contains(k))
        .collect();
    assert!(
        missing.is_empty(),
        "{file} fields missing from docs/schema.md (add them to its {file} table): {missing:?}"
    );
}
