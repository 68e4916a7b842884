//! `--otlp URL`: the run, as it goes, to an OpenTelemetry collector over OTLP/HTTP (protobuf):
//! at every sweep the live processes' metrics with the process semantic conventions
//! (`process.cpu.time`, `process.memory.usage`, `process.memory.virtual`, `process.disk.io`,
//! `process.thread.count`, `process.open_file_descriptor.count`; one resource per process, as
//! the conventions have it), and one span per process when it ends, its parent the span of the
//! process that forked it, its exit figures as attributes. The requests are built by pure
//! functions ([`metrics_request`], [`spans_request`]); [`Exporter`] posts them from a thread of
//! its own through a bounded queue: a collector that is slow or down costs the run a warning,
//! never a wait (a full queue drops, and says how much at the end).
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message as _;

use crate::store::records::{ProcessRecord, SampleRecord};

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

fn text(key: &str, value: &str) -> KeyValue {
    kv(key, any_value::Value::StringValue(value.to_string()))
}

fn int(key: &str, value: i64) -> KeyValue {
    kv(key, any_value::Value::IntValue(value))
}

fn scope() -> InstrumentationScope {
    InstrumentationScope {
        name: "montrace".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..InstrumentationScope::default()
    }
}

/// What every resource of the run carries: the service, the host, the run's id and labels.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunAttributes {
    pub host: String,
    pub run_id: String,
    pub labels: Vec<(String, String)>,
}

impl RunAttributes {
    fn attributes(&self) -> Vec<KeyValue> {
        let mut a = vec![
            text("service.name", "montrace"),
            text("host.name", &self.host),
            text("montrace.run_id", &self.run_id),
        ];
        a.extend(
            self.labels
                .iter()
                .map(|(k, v)| text(&format!("montrace.label.{k}"), v)),
        );
        a
    }
}

/// The process attributes of the conventions for a process of the tree.
fn process_attributes(p: &ProcessRecord) -> Vec<KeyValue> {
    let mut a = vec![int("process.pid", i64::from(p.pid))];
    if let Some(parent) = p.parent_pid {
        a.push(int("process.parent_pid", i64::from(parent)));
    }
    let executable = p
        .filename
        .as_deref()
        .and_then(|f| f.rsplit('/').next())
        .unwrap_or(&p.comm);
    a.push(text("process.executable.name", executable));
    if let Some(path) = &p.filename {
        a.push(text("process.executable.path", path));
    }
    if let Some(argv) = &p.argv {
        a.push(text("process.command_line", &argv.join(" ")));
    }
    a.push(text(
        "process.creation.time",
        &crate::units::rfc3339(p.start_time_ns),
    ));
    a
}

fn point(time_ns: i64, start_ns: i64, value: f64, attributes: Vec<KeyValue>) -> NumberDataPoint {
    NumberDataPoint {
        attributes,
        start_time_unix_nano: start_ns.max(0) as u64,
        time_unix_nano: time_ns.max(0) as u64,
        value: Some(number_data_point::Value::AsDouble(value)),
        ..NumberDataPoint::default()
    }
}

fn gauge(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(metric::Data::Gauge(Gauge {
            data_points: points,
        })),
        ..Metric::default()
    }
}

fn counter(name: &str, unit: &str, points: Vec<NumberDataPoint>) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(metric::Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        })),
        ..Metric::default()
    }
}

/// One sweep: a resource per live process (its record from the tracker, its sample).
pub fn metrics_request(
    run: &RunAttributes,
    sweep: &[(&ProcessRecord, &SampleRecord)],
) -> ExportMetricsServiceRequest {
    let resource_metrics = sweep
        .iter()
        .map(|(p, s)| {
            let (t, start) = (s.time_ns, p.start_time_ns);
            let mut metrics = vec![counter(
                "process.cpu.time",
                "s",
                vec![
                    point(
                        t,
                        start,
                        s.cpu_user_ns as f64 / 1e9,
                        vec![text("cpu.mode", "user")],
                    ),
                    point(
                        t,
                        start,
                        s.cpu_system_ns as f64 / 1e9,
                        vec![text("cpu.mode", "system")],
                    ),
                ],
            )];
            if let Some(rss) = s.rss_bytes {
                metrics.push(gauge(
                    "process.memory.usage",
                    "By",
                    vec![point(t, start, rss as f64, vec![])],
                ));
            }
            if let Some(vms) = s.vms_bytes {
                metrics.push(gauge(
                    "process.memory.virtual",
                    "By",
                    vec![point(t, start, vms as f64, vec![])],
                ));
            }
            if let (Some(read), Some(write)) = (s.read_bytes, s.write_bytes) {
                metrics.push(counter(
                    "process.disk.io",
                    "By",
                    vec![
                        point(
                            t,
                            start,
                            read as f64,
                            vec![text("disk.io.direction", "read")],
                        ),
                        point(
                            t,
                            start,
                            write as f64,
                            vec![text("disk.io.direction", "write")],
                        ),
                    ],
                ));
            }
            if let Some(threads) = s.threads {
                metrics.push(gauge(
                    "process.thread.count",
                    "{thread}",
                    vec![point(t, start, f64::from(threads), vec![])],
                ));
            }
            if let Some(fds) = s.fds {
                metrics.push(gauge(
                    "process.open_file_descriptor.count",
                    "{file_descriptor}",
                    vec![point(t, start, f64::from(fds), vec![])],
                ));
            }
            let mut attributes = run.attributes();
            attributes.extend(process_attributes(p));
            ResourceMetrics {
                resource: Some(Resource {
                    attributes,
                    ..Resource::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(scope()),
                    metrics,
                    ..ScopeMetrics::default()
                }],
                ..ResourceMetrics::default()
            }
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }
}

/// FNV-1a, for ids that are the same wherever they are computed.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The run's trace id (16 bytes, from its run id).
pub fn trace_id(run_id: &str) -> Vec<u8> {
    let a = fnv(&[run_id.as_bytes(), b"a"]);
    let b = fnv(&[run_id.as_bytes(), b"b"]);
    [a.to_be_bytes(), b.to_be_bytes()].concat()
}

/// A process's span id (8 bytes, never zero), from its identity: so that a child's span names
/// its parent's without montrace keeping the parent's.
pub fn span_id(pid: u32, start_time_ns: i64) -> Vec<u8> {
    let id = fnv(&[&pid.to_le_bytes(), &start_time_ns.to_le_bytes()]).max(1);
    id.to_be_bytes().to_vec()
}

/// The spans of processes that ended, one resource for the run.
pub fn spans_request(run: &RunAttributes, ended: &[ProcessRecord]) -> ExportTraceServiceRequest {
    let trace = trace_id(&run.run_id);
    let spans = ended
        .iter()
        .map(|p| {
            let mut attributes = process_attributes(p);
            let mut put = |key: &str, value: Option<i64>| {
                if let Some(v) = value {
                    attributes.push(int(key, v));
                }
            };
            put("process.exit.code", p.exit_code.map(i64::from));
            put("process.exit.signal", p.exit_signal.map(i64::from));
            let as_i64 = |v: Option<u64>| v.map(|v| v.min(i64::MAX as u64) as i64);
            put("montrace.cpu.user_ns", as_i64(p.cpu_user_ns));
            put("montrace.cpu.system_ns", as_i64(p.cpu_system_ns));
            put("montrace.memory.peak_bytes", as_i64(p.peak_rss_bytes));
            put("montrace.disk.read_bytes", as_i64(p.read_bytes));
            put("montrace.disk.write_bytes", as_i64(p.write_bytes));
            put("montrace.run_queue_ns", as_i64(p.run_queue_ns));
            put("montrace.blocked_ns", as_i64(p.blocked_ns));
            let failed = p.exit_code.is_some_and(|c| c != 0) || p.exit_signal.is_some();
            Span {
                trace_id: trace.clone(),
                span_id: span_id(p.pid, p.start_time_ns),
                parent_span_id: match (p.parent_pid, p.parent_start_time_ns) {
                    (Some(pid), Some(start)) => span_id(pid, start),
                    _ => Vec::new(),
                },
                name: p
                    .filename
                    .as_deref()
                    .and_then(|f| f.rsplit('/').next())
                    .unwrap_or(&p.comm)
                    .to_string(),
                kind: span::SpanKind::Internal as i32,
                start_time_unix_nano: p.start_time_ns.max(0) as u64,
                end_time_unix_nano: p.end_time_ns.unwrap_or(p.start_time_ns).max(0) as u64,
                attributes,
                status: failed.then(|| Status {
                    code: status::StatusCode::Error as i32,
                    message: match (p.exit_code, p.exit_signal) {
                        (_, Some(sig)) => format!("killed by signal {sig}"),
                        (Some(code), _) => format!("exit code {code}"),
                        _ => String::new(),
                    },
                }),
                ..Span::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: run.attributes(),
                ..Resource::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(scope()),
                spans,
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

/// A request on its way: the path under the collector's URL and the encoded body.
struct Post {
    path: &'static str,
    body: Vec<u8>,
}

/// What the exporter did, for the end of the run.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub sent: u64,
    pub failed: u64,
    /// Requests dropped because the queue was full (a slow collector) or the end came first.
    pub dropped: u64,
}

/// Requests waiting at most; a collector slower than the sweeps loses the newest.
const QUEUE: usize = 64;
/// A request's whole time.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Posts requests to an OTLP/HTTP collector from a thread of its own.
pub struct Exporter {
    tx: Option<mpsc::SyncSender<Post>>,
    thread: Option<std::thread::JoinHandle<Report>>,
    dropped: u64,
}

impl Exporter {
    /// `url`: the collector's base, e.g. `http://127.0.0.1:4318` (`/v1/metrics` and
    /// `/v1/traces` are added). Only `http://`: this montrace has no TLS.
    pub fn start(url: &str) -> Result<Exporter, String> {
        let base = url.trim_end_matches('/').to_string();
        if !base.starts_with("http://") {
            return Err(format!(
                "--otlp {url}: give the collector's http:// address (e.g. http://127.0.0.1:4318); \
                 this montrace does not speak TLS: put a local collector in front"
            ));
        }
        let (tx, rx) = mpsc::sync_channel::<Post>(QUEUE);
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(1))
            .timeout(TIMEOUT)
            .build();
        let thread = std::thread::Builder::new()
            .name("otlp".into())
            .spawn(move || {
                // A thread's capabilities are its own (capset), and this one may outlive its
                // repetition (a silent collector, `finish` leaves it its last request): with
                // `--repeat`, the repetitions before the last start it while montrace keeps its
                // permitted set for the next load. It only talks HTTP: it keeps none. An error
                // here leaves the thread as it was, which is no worse than before.
                let _ = crate::kernel::privilege::drop_all();
                let mut report = Report::default();
                let mut warned = false;
                for post in rx {
                    let target = format!("{base}{}", post.path);
                    let result = agent
                        .post(&target)
                        .set("Content-Type", "application/x-protobuf")
                        .send_bytes(&post.body);
                    match result {
                        Ok(_) => report.sent += 1,
                        Err(err) => {
                            report.failed += 1;
                            if !warned {
                                warned = true;
                                crate::say!(
                                    "montrace: warning: the OTLP collector at {target} did not \
                                     take the run's data ({err}); the run goes on, its files \
                                     are complete (said once)"
                                );
                            }
                        }
                    }
                }
                report
            })
            .map_err(|e| format!("cannot start the OTLP thread: {e}"))?;
        Ok(Exporter {
            tx: Some(tx),
            thread: Some(thread),
            dropped: 0,
        })
    }

    fn post(&mut self, path: &'static str, body: Vec<u8>) {
        let Some(tx) = &self.tx else { return };
        if tx.try_send(Post { path, body }).is_err() {
            self.dropped += 1;
        }
    }

    pub fn send_metrics(&mut self, request: &ExportMetricsServiceRequest) {
        if !request.resource_metrics.is_empty() {
            self.post("/v1/metrics", request.encode_to_vec());
        }
    }

    pub fn send_spans(&mut self, request: &ExportTraceServiceRequest) {
        let any = request
            .resource_spans
            .iter()
            .any(|r| r.scope_spans.iter().any(|s| !s.spans.is_empty()));
        if any {
            self.post("/v1/traces", request.encode_to_vec());
        }
    }

    /// Lets the queue drain for at most `within`, then reports (what is still queued then is
    /// dropped: the thread is left to finish its last request on its own).
    pub fn finish(mut self, within: Duration) -> Report {
        drop(self.tx.take());
        let deadline = Instant::now() + within;
        let thread = self.thread.take();
        let mut report = match thread {
            Some(thread) => loop {
                if thread.is_finished() {
                    break thread.join().unwrap_or_default();
                }
                if Instant::now() >= deadline {
                    break Report {
                        dropped: 1,
                        ..Report::default()
                    };
                }
                std::thread::sleep(Duration::from_millis(5));
            },
            None => Report::default(),
        };
        report.dropped += self.dropped;
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: u32, start: i64, parent: Option<(u32, i64)>) -> ProcessRecord {
        ProcessRecord {
            pid,
            start_time_ns: start,
            parent_pid: parent.map(|p| p.0),
            parent_start_time_ns: parent.map(|p| p.1),
            end_time_ns: Some(start + 1_000),
            filename: Some("/usr/bin/cc".into()),
            argv: Some(vec!["cc".into(), "-c".into(), "a.c".into()]),
            comm: "cc".into(),
            exit_code: Some(0),
            cpu_user_ns: Some(5),
            ..ProcessRecord::default()
        }
    }

    fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
        attrs
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref()?.value.as_ref())
    }

    #[test]
    fn spans_link_each_process_to_the_one_that_forked_it() {
        let run = RunAttributes {
            host: "h".into(),
            run_id: "20261124T100000Z-0000000000000001".into(),
            labels: vec![("branch".into(), "main".into())],
        };
        let parent = process(10, 100, None);
        let mut child = process(11, 200, Some((10, 100)));
        child.exit_code = Some(2);
        let request = spans_request(&run, &[child.clone(), parent.clone()]);
        let rs = &request.resource_spans[0];
        let spans = &rs.scope_spans[0].spans;
        assert_eq!(spans.len(), 2);
        assert_eq!(
            spans[0].parent_span_id, spans[1].span_id,
            "the child names its parent"
        );
        assert!(
            spans[1].parent_span_id.is_empty(),
            "the command has no parent in the tree"
        );
        assert_eq!(spans[0].trace_id, spans[1].trace_id);
        assert_eq!(spans[0].trace_id.len(), 16);
        assert_eq!(spans[0].name, "cc");
        assert_eq!(
            spans[0].status.as_ref().map(|s| s.code),
            Some(status::StatusCode::Error as i32)
        );
        assert_eq!(spans[1].status, None);
        assert_eq!(
            attr(&spans[0].attributes, "process.exit.code"),
            Some(&any_value::Value::IntValue(2))
        );
        let resource = rs.resource.as_ref().unwrap();
        assert_eq!(
            attr(&resource.attributes, "montrace.label.branch"),
            Some(&any_value::Value::StringValue("main".into()))
        );
        // Encoded and decoded as the collector will.
        let bytes = request.encode_to_vec();
        assert_eq!(
            ExportTraceServiceRequest::decode(&bytes[..]).unwrap(),
            request
        );
    }

    #[test]
    fn a_sweep_is_a_resource_per_process_with_the_conventions_metrics() {
        let p = process(10, 100, None);
        let s = SampleRecord {
            time_ns: 5_000,
            pid: 10,
            cpu_user_ns: 1_500_000_000,
            cpu_system_ns: 500_000_000,
            rss_bytes: Some(4096),
            vms_bytes: Some(8192),
            read_bytes: Some(1),
            write_bytes: Some(2),
            threads: Some(3),
            fds: Some(4),
            ..SampleRecord::default()
        };
        let request = metrics_request(&RunAttributes::default(), &[(&p, &s)]);
        let rm = &request.resource_metrics[0];
        assert_eq!(
            attr(&rm.resource.as_ref().unwrap().attributes, "process.pid"),
            Some(&any_value::Value::IntValue(10))
        );
        let names: Vec<&str> = rm.scope_metrics[0]
            .metrics
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "process.cpu.time",
                "process.memory.usage",
                "process.memory.virtual",
                "process.disk.io",
                "process.thread.count",
                "process.open_file_descriptor.count"
            ]
        );
        let Some(metric::Data::Sum(cpu)) = &rm.scope_metrics[0].metrics[0].data else {
            panic!("cpu time is a sum")
        };
        assert!(cpu.is_monotonic);
        assert_eq!(
            cpu.data_points[0].value,
            Some(number_data_point::Value::AsDouble(1.5))
        );
    }

    #[test]
    fn only_plain_http_collectors() {
        assert!(Exporter::start("https://collector:4318").is_err());
        assert!(Exporter::start("grpc://x").is_err());
        // A collector that is not there: nothing waits, the failure is counted.
        let mut e = Exporter::start("http://127.0.0.1:9").unwrap();
        e.send_spans(&spans_request(
            &RunAttributes::default(),
            &[process(1, 1, None)],
        ));
        let report = e.finish(Duration::from_secs(3));
        assert_eq!((report.sent, report.failed), (0, 1), "{report:?}");
    }
}
