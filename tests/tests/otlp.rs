//! `montrace run --otlp URL`: a real OTLP/HTTP receiver on 127.0.0.1, decoding montrace's
//! protobuf requests with the OpenTelemetry project's own Python classes, gets one span per
//! process of the tree (the tree's shape in the parent links) and each sweep's process metrics
//! with the semantic conventions' names; a collector that is not there costs a warning and
//! nothing else.
use std::collections::HashMap;
use std::process::{Command, Stdio};

use tests::{require_root, run_montrace, wait_for_file};

/// Receives OTLP/HTTP on 127.0.0.1 (a free port, written to argv[1]), decodes each request and
/// appends one JSON line per request to argv[2].
const COLLECTOR: &str = r#"
import json, sys, http.server
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

port_file, out_file = sys.argv[1], sys.argv[2]

def attrs(kvs):
    out = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out

class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        line = {"path": self.path, "type": self.headers["Content-Type"]}
        if self.path == "/v1/traces":
            req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            line["spans"] = [
                {"trace": s.trace_id.hex(), "id": s.span_id.hex(), "parent": s.parent_span_id.hex(),
                 "name": s.name, "start": s.start_time_unix_nano, "end": s.end_time_unix_nano,
                 "attrs": attrs(s.attributes)}
                for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
        else:
            req = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
            def points(m):
                data = m.gauge.data_points if m.HasField("gauge") else m.sum.data_points
                return [{"t": p.time_unix_nano, "v": p.as_double, "attrs": attrs(p.attributes)}
                        for p in data]
            line["resources"] = [
                {"attrs": attrs(rm.resource.attributes),
                 "metrics": {m.name: points(m) for sm in rm.scope_metrics for m in sm.metrics}}
                for rm in req.resource_metrics]
        with open(out_file, "a") as f:
            f.write(json.dumps(line) + "\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
"#;

#[test]
fn a_collector_gets_a_span_per_process_and_the_sweeps_metrics() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let port_file = tmp.path().join("port");
    let out_file = tmp.path().join("received.jsonl");
    let mut collector = Command::new("python3")
        .arg("-c")
        .arg(COLLECTOR)
        .arg(&port_file)
        .arg(&out_file)
        .stdin(Stdio::null())
        .spawn()
        .expect("starting the Python collector");
    wait_for_file(&port_file);
    let port = std::fs::read_to_string(&port_file).unwrap();
    let url = format!("http://127.0.0.1:{}", port.trim());
    let run = run_montrace(
        &[
            "--no-report",
            "--interval",
            "100ms",
            "--otlp",
            &url,
            "--label",
            "team=build",
        ],
        &[
            "sh",
            "-c",
            "sleep 0.35 & sh -c '/bin/true; sleep 0.25'; wait",
        ],
    );
    let _ = collector.kill();
    let _ = collector.wait();
    run.assert_code(0);
    assert!(!run.stderr.contains("OTLP"), "no warning: {}", run.stderr);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.iter().all(|l| l["type"] == "application/x-protobuf"));

    // One span per process, exactly; the parent links are the tree's.
    let spans: Vec<&serde_json::Value> = lines
        .iter()
        .filter_map(|l| l["spans"].as_array())
        .flatten()
        .collect();
    let processes = run.processes();
    assert_eq!(spans.len(), processes.len(), "{spans:#?}");
    let run_json = run.run_json();
    let by_pid: HashMap<i64, &serde_json::Value> = spans
        .iter()
        .map(|s| (s["attrs"]["process.pid"].as_i64().unwrap(), *s))
        .collect();
    for p in &processes {
        let span = by_pid[&(p.pid as i64)];
        assert_eq!(span["start"].as_i64(), Some(p.start_time), "{span}");
        assert_eq!(span["end"].as_i64(), p.end_time, "{span}");
        let parent = processes.iter().find(|q| p.is_child_of(q));
        match parent {
            Some(q) => assert_eq!(span["parent"], by_pid[&(q.pid as i64)]["id"], "{span}"),
            None => assert_eq!(span["parent"], "", "the command's span is the root: {span}"),
        }
        assert_eq!(span["trace"], spans[0]["trace"]);
    }
    assert!(
        spans.iter().any(|s| s["name"] == "sleep"),
        "spans are named by program: {spans:#?}"
    );

    // Each sweep: a resource per live process, with the conventions' metrics and the run's
    // id and labels.
    let resources: Vec<&serde_json::Value> = lines
        .iter()
        .filter_map(|l| l["resources"].as_array())
        .flatten()
        .collect();
    // The root shell lives at least the 0.35 s of its `sleep` (nanosleep never returns early)
    // beside one sleep or more; sweeps come at once and every 100 ms, late on a busy machine,
    // never skipped: 5 resources need three sweeps in those 0.35 s.
    assert!(resources.len() >= 5, "{} resources", resources.len());
    for r in &resources {
        assert_eq!(r["attrs"]["montrace.run_id"], run_json["run_id"]);
        assert_eq!(r["attrs"]["montrace.label.team"], "build");
        let pid = r["attrs"]["process.pid"].as_i64().unwrap();
        assert!(by_pid.contains_key(&pid), "a process of the tree: {r}");
        let metrics = r["metrics"].as_object().unwrap();
        for name in [
            "process.cpu.time",
            "process.memory.usage",
            "process.thread.count",
        ] {
            assert!(metrics.contains_key(name), "{name} in {metrics:?}");
        }
    }
    // Every point is a row of samples.parquet: same process, same time, same values.
    let samples = run.samples();
    let mut checked = 0;
    for r in &resources {
        let pid = r["attrs"]["process.pid"].as_i64().unwrap() as u32;
        let rss = &r["metrics"]["process.memory.usage"][0];
        let t = rss["t"].as_i64().unwrap();
        let row = samples
            .iter()
            .find(|s| s.pid == pid && s.time == t && s.source == "procfs")
            .unwrap_or_else(|| panic!("no sample of {pid} at {t}"));
        assert_eq!(rss["v"].as_f64(), row.rss_bytes.map(|b| b as f64), "{r}");
        let cpu = r["metrics"]["process.cpu.time"].as_array().unwrap();
        let mode = |m: &str| {
            cpu.iter()
                .find(|p| p["attrs"]["cpu.mode"] == m)
                .and_then(|p| p["v"].as_f64())
                .unwrap()
        };
        assert_eq!(mode("user"), row.cpu_user_ns as f64 / 1e9, "{r}");
        assert_eq!(mode("system"), row.cpu_system_ns as f64 / 1e9, "{r}");
        let threads = r["metrics"]["process.thread.count"][0]["v"].as_f64();
        assert_eq!(threads, row.threads.map(f64::from), "{r}");
        checked += 1;
    }
    // Every request reached the collector: at the end montrace gives the queue 2 s, which a
    // local collector decoding a dozen requests needs a small part of.
    assert_eq!(
        checked,
        samples.iter().filter(|s| s.source == "procfs").count(),
        "a point for every sweep row"
    );
}

#[test]
fn a_collector_that_is_not_there_costs_a_warning_only() {
    require_root();
    // A port nothing listens on: a bound, never-listening socket holds it.
    let holder = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let run = run_montrace(
        &[
            "--no-report",
            "--interval",
            "50ms",
            "--otlp",
            &format!("http://127.0.0.1:{port}"),
        ],
        &["sleep", "0.5"],
    );
    run.assert_code(0);
    assert_eq!(
        run.stderr.matches("did not take the run's data").count(),
        1,
        "said once: {}",
        run.stderr
    );
    assert!(run.run_json()["exit_status"] == 0);
    assert!(run.processes().len() == 1);
    // It cost no wait: every request failed at once and none was left queued when the run
    // ended (the end gives the queue 2 s, then counts what is left as dropped). Not "the run
    // took under 2 s": montrace's start (loading its programs) and end are the machine's. The
    // guarantee: nothing listens on the port, so the kernel refuses each connection at once
    // (RST), and a 0.5 s command queues a dozen requests of the 64 the queue holds.
    let end = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("montrace: warning: OTLP: "))
        .unwrap_or_else(|| panic!("no OTLP warning at the end: {}", run.stderr));
    let counts: Vec<u64> = end
        .split(", ")
        .take(3)
        .map(|part| part.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        matches!(counts[..], [0, failed, 0] if failed > 0),
        "sent, failed, dropped: {counts:?}: {end}"
    );
    // A bad address is a usage error before anything starts.
    let bad = run_montrace(&["--otlp", "https://collector:4318"], &["true"]);
    bad.assert_code(2);
    assert!(bad.stderr.contains("http://"), "{}", bad.stderr);
}
