//! examples/analysis.ipynb runs from top to bottom on a real run (with nbclient, as Jupyter
//! would), loads it with the montrace package (whose view of the run it shows), and shows the
//! right per-command table.
use std::path::Path;

use serde_json::Value;
use tests::{known_workload, launch_montrace, python, read_json};

const NOTEBOOK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/analysis.ipynb");
const PACKAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../python");

/// Executes a notebook with nbclient on the `python3` kernel and writes the executed copy.
const EXECUTE: &str = r#"
import sys
import nbformat
from nbclient import NotebookClient

notebook, workdir, executed = sys.argv[1:4]
nb = nbformat.read(notebook, as_version=4)
NotebookClient(
    nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": workdir}}
).execute()
nbformat.write(nb, executed)
"#;

fn cells(notebook: &Value) -> &Vec<Value> {
    notebook["cells"].as_array().expect("a notebook has cells")
}

/// A multi-line string of a notebook (nbformat stores them as a string or a list of lines).
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

/// The code cell tagged `tag`.
fn tagged<'a>(notebook: &'a Value, tag: &str) -> &'a Value {
    cells(notebook)
        .iter()
        .find(|cell| {
            cell["metadata"]["tags"]
                .as_array()
                .is_some_and(|tags| tags.iter().any(|t| t == tag))
        })
        .unwrap_or_else(|| panic!("the notebook has no cell tagged `{tag}`"))
}

/// Everything a cell printed or showed as text.
fn output_text(cell: &Value) -> String {
    cell["outputs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|output| match output["output_type"].as_str() {
            Some("stream") => text(&output["text"]),
            _ => text(&output["data"]["text/plain"]),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn notebook_runs_top_to_bottom_against_a_real_run() {
    // The committed notebook carries no outputs.
    let committed = read_json(Path::new(NOTEBOOK)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(committed["nbformat"], 4);
    assert_eq!(committed["metadata"]["kernelspec"]["name"], "python3");
    for cell in cells(&committed)
        .iter()
        .filter(|c| c["cell_type"] == "code")
    {
        assert_eq!(
            (&cell["outputs"], &cell["execution_count"]),
            (&serde_json::json!([]), &Value::Null),
            "commit the notebook with its outputs cleared: {cell}"
        );
    }

    let workload = known_workload();
    let run = launch_montrace(&["--interval", "100ms"], &workload.command())
        .ahead_of_the_machine()
        .run();
    run.assert_code(0);
    let tmp = tempfile::tempdir().unwrap();
    let executed = tmp.path().join("executed.ipynb");
    python(
        "executing examples/analysis.ipynb",
        EXECUTE,
        &[
            NOTEBOOK,
            tmp.path().to_str().unwrap(),
            executed.to_str().unwrap(),
        ],
        &[
            ("MONTRACE_RUN", run.dir.to_str().unwrap()),
            ("MPLBACKEND", "Agg"),
            // The notebook uses the montrace package: this checkout's (the wheel's tests are the
            // python tier's).
            ("PYTHONPATH", PACKAGE),
        ],
    );
    let notebook = read_json(&executed).unwrap_or_else(|e| panic!("{e}"));
    for cell in cells(&notebook).iter().filter(|c| c["cell_type"] == "code") {
        assert!(
            cell["execution_count"].is_u64(),
            "every code cell ran: {cell}"
        );
        for output in cell["outputs"].as_array().unwrap() {
            assert_ne!(output["output_type"], "error", "{output}");
        }
    }
    assert!(
        output_text(tagged(&notebook, "parameters")).contains(run.dir.to_str().unwrap()),
        "the notebook read MONTRACE_RUN"
    );

    // The tree's memory: the three holders' 20 MiB at once.
    let memory = cells(&notebook)
        .iter()
        .map(output_text)
        .find(|text| text.contains("peak USS:"))
        .expect("the memory cell prints the peaks");
    eprintln!("{memory}");
    let peak_uss: f64 = memory
        .lines()
        .find_map(|l| l.strip_prefix("peak USS: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `peak USS: N MiB` in\n{memory}"));
    // The three holders start together, burn 100 ms of CPU each (ahead of other work) and then
    // hold 20 MiB for 500 ms (never less): their holds overlap for most of those 500 ms, in
    // which sweeps come every 100 ms, late on a busy machine, never skipped.
    assert!(
        peak_uss >= 60.0,
        "three holders had 20 MiB each at once: {memory}"
    );

    // montrace.load's run shows itself: the headline figures, the programs, the memory plot.
    let html: String = cells(&notebook)
        .iter()
        .flat_map(|cell| cell["outputs"].as_array().into_iter().flatten())
        .map(|output| text(&output["data"]["text/html"]))
        .collect();
    for part in ["memory peak of the tree", "<svg", workload.holder.as_str()] {
        assert!(html.contains(part), "no {part:?} in the run's view: {html}");
    }
    let processes_line = format!("{} processes, ", run.processes().len());
    assert!(
        cells(&notebook)
            .iter()
            .any(|cell| output_text(cell).contains(&processes_line)),
        "the load cell counts the processes montrace recorded"
    );

    // The per-command table: one line per program, `index filename instances ...`.
    let table = output_text(tagged(&notebook, "per-command"));
    eprintln!("{table}");
    let rows = run.processes();
    let sh = run.root(&rows).filename.clone().unwrap();
    for (program, instances) in [
        (workload.holder.as_str(), "3"),
        ("/bin/true", "5"),
        (&sh, "1"),
    ] {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(program))
            .unwrap_or_else(|| panic!("no row for {program} in the table:\n{table}"));
        assert_eq!(
            line.split_whitespace().nth(2),
            Some(instances),
            "{program} ran {instances} times: {line}"
        );
    }
}
