#!/usr/bin/env python3
"""montrace's GPU figures against nvidia-smi's, on a real NVIDIA GPU (`cargo xtask gpu-check`).

    python3 xtask/gpu-check/gpu_check.py --montrace PATH [--json OUT.json] [--seconds 12]

Needs python3 and nvidia-smi; PyTorch or CuPy for the workload; pyarrow to read the Parquet
files (without it, `montrace export --format csv` is read instead). No Rust toolchain, no network.

What it does, in at most ~90 s:
1. `montrace --version`, `nvidia-smi -L` and `--query-gpu` (static figures), `montrace doctor`;
2. `montrace run -i 200ms --gpu require -- python3 workload.py`: a parent and a child process,
   each holding a known amount of GPU memory and running matrix products for --seconds, while
   two threads beside it poll `nvidia-smi --query-gpu=...` and `--query-compute-apps=...`;
3. compares run.json's `gpu`, gpu.parquet and gpu_processes.parquet with nvidia-smi's samples
   taken in the steady part of the run (both processes holding their memory) and prints a table
   `figure | montrace | nvidia-smi | diff | verdict`;
4. a second short run with `--limit gpu-mem` under what the parent holds: it must exit 124 with
   the breach in run.json;
5. what opening NVML costs a run's start-up: `/bin/true` recorded 10 times with `--gpu off` and
   10 with `--gpu auto`, interleaved (run.json's `startup_ms`, medians).

Every step is guarded: a failure is reported (in the table's notes and the JSON's `errors`) and
the rest goes on. Verdicts: `ok`, `FAIL` (a hard check: attribution, per-process memory, names,
internal consistency), `check` (a figure sampled at other moments than nvidia-smi's, such as
utilization or power, off by more than its tolerance), `info` (nothing to compare with).
Exit status: 0 when no hard check failed, 1 when one did or a step failed, 2 when there is no
NVIDIA GPU (or no framework to load one).
"""

import argparse
import csv
import datetime
import glob
import importlib.util
import io
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "workload.py")
MIB = 1024 * 1024

# --query-gpu fields every driver of the last years knows, then ones that some lack.
GPU_FIELDS = [
    "index", "uuid", "name", "driver_version", "memory.total", "memory.used",
    "utilization.gpu", "utilization.memory", "power.draw", "temperature.gpu",
    "clocks.sm", "clocks.mem",
]
GPU_OPTIONAL_FIELDS = [
    "accounting.mode", "mig.mode.current", "clocks_throttle_reasons.active",
    "clocks_event_reasons.active", "persistence_mode", "power.draw.instant",
]
APP_FIELDS = ["pid", "used_memory", "gpu_uuid", "process_name"]

# The nvmlClocksThrottleReason bits, named as montrace names them (nvml.rs).
THROTTLE_BITS = [
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
]


class Check:
    """What the check found: rows of the table, errors, and everything else for the JSON."""

    def __init__(self, deadline):
        self.deadline = deadline
        self.rows = []
        self.errors = []
        self.notes = []
        self.data = {}
        self.exit_code = None

    def left(self):
        return self.deadline - time.monotonic()

    def row(self, figure, montrace, smi, diff=None, verdict="info", unit=""):
        self.rows.append({
            "figure": figure, "montrace": montrace, "nvidia_smi": smi, "diff": diff,
            "unit": unit, "verdict": verdict,
        })

    def error(self, step, message):
        self.errors.append({"step": step, "error": message})
        print(f"gpu-check: {step}: {message}", file=sys.stderr, flush=True)

    def step(self, name, fn, *args):
        """Runs one step; a failure is recorded and the check goes on. Returns fn's value."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - report whatever a first contact reveals
            self.error(name, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            return None


def run(cmd, timeout, **kw):
    """(returncode, stdout, stderr); returncode None when it timed out or could not start."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1, timeout),
                           stdin=subprocess.DEVNULL, **kw)
        return p.returncode, p.stdout, p.stderr
    except FileNotFoundError as exc:
        return None, "", f"cannot start: {exc}"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return None, out, err + f"\n(timed out after {timeout:.0f} s)"


def smi_value(text):
    """A --format=csv,noheader,nounits field: a float, a string, or None for [N/A] and such."""
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    try:
        return float(text)
    except ValueError:
        return text


def smi_query(kind, fields, timeout=5):
    """One nvidia-smi query: a list of {field: value}; raises with nvidia-smi's words."""
    rc, out, err = run(["nvidia-smi", f"--query-{kind}={','.join(fields)}",
                        "--format=csv,noheader,nounits"], timeout)
    if rc != 0:
        raise RuntimeError(f"nvidia-smi --query-{kind} exit {rc}: {(out + err).strip()[:400]}")
    rows = []
    for rec in csv.reader(io.StringIO(out), skipinitialspace=True):
        if not rec or (len(rec) == 1 and not rec[0].strip()):
            continue
        if "No running" in rec[0]:
            continue
        rows.append({f: smi_value(v) for f, v in zip(fields, rec)})
    return rows


class Poller(threading.Thread):
    """Polls one nvidia-smi query as fast as it answers (at most every `period` s); each sample
    is (time.time() at the middle of the call, rows)."""

    def __init__(self, kind, fields, period=0.25):
        super().__init__(daemon=True)
        self.kind, self.fields, self.period = kind, fields, period
        self.samples, self.failures = [], []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            t0 = time.time()
            try:
                rows = smi_query(self.kind, self.fields)
                self.samples.append(((t0 + time.time()) / 2, rows))
            except Exception as exc:  # noqa: BLE001
                if len(self.failures) < 5:
                    self.failures.append(str(exc))
            self.stop.wait(max(0.0, self.period - (time.time() - t0)))


# ---------------------------------------------------------------- reading montrace's files


def parse_rfc3339_ns(text):
    """'2026-11-25T19:50:01.123456789Z' (montrace export's form) to seconds since the epoch."""
    if not text:
        return None
    text = text.strip().replace("Z", "+00:00")
    frac = 0.0
    if "." in text:
        head, rest = text.split(".", 1)
        digits = rest[:len(rest) - len(rest.lstrip("0123456789"))]
        zone = rest[len(digits):]
        frac = float("0." + digits) if digits else 0.0
        text = head + zone
    return datetime.datetime.fromisoformat(text).timestamp() + frac


def read_table_pyarrow(run_dir, name):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(run_dir, f"{name}.parquet")
    if os.path.exists(path):
        table = pq.read_table(path)
    else:  # montrace did not finish: its closed parts
        parts = sorted(glob.glob(os.path.join(run_dir, f"{name}.parts", "*.parquet")))
        if not parts:
            return None
        table = pa.concat_tables([pq.read_table(p) for p in parts])
    cols = {}
    for field in table.schema:
        col = table.column(field.name)
        if pa.types.is_timestamp(field.type):
            # Schema 3 writes microseconds (UTC), older runs nanoseconds: scale by the unit.
            per_s = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[field.type.unit]
            cols[field.name] = [None if v is None else v / per_s
                                for v in col.cast(pa.int64()).to_pylist()]
        else:
            cols[field.name] = col.to_pylist()
    n = table.num_rows
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


TIME_COLUMNS = {"time", "start_time", "end_time", "parent_start_time"}
NUMBER_PREFIXES = ("utilization", "memory", "power", "energy", "temperature", "sm_", "gpu_",
                   "max_", "lifetime", "context", "pid", "ppid", "index")


def read_table_csv(montrace, run_dir, name, cache={}):
    """The table through `montrace export --format csv` (no pyarrow here)."""
    out = cache.get(run_dir)
    if out is None:
        out = os.path.join(run_dir, "gpu-check-csv")
        rc, o, e = run([montrace, "export", run_dir, "--format", "csv", "--out", out], 60)
        if rc != 0:
            raise RuntimeError(f"montrace export --format csv: exit {rc}: {(o + e).strip()}")
        cache[run_dir] = out
    path = os.path.join(out, f"{name}.csv")
    if not os.path.exists(path):
        return None
    rows = []
    with open(path, newline="") as f:
        for rec in csv.DictReader(f):
            row = {}
            for k, v in rec.items():
                if v == "":
                    row[k] = None
                elif k in TIME_COLUMNS:
                    row[k] = parse_rfc3339_ns(v)
                elif k == "throttle_reasons":
                    row[k] = json.loads(v)
                elif k.startswith(NUMBER_PREFIXES) or k.endswith(("_bytes", "_mhz", "_c")):
                    try:
                        row[k] = float(v)
                    except ValueError:
                        row[k] = v
                else:
                    row[k] = v
            rows.append(row)
    return rows


def read_table(montrace, run_dir, name):
    if importlib.util.find_spec("pyarrow") is not None:
        return read_table_pyarrow(run_dir, name)
    return read_table_csv(montrace, run_dir, name)


# ---------------------------------------------------------------- figures


def mean(values):
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.fmean(values) if values else None


def median(values):
    values = [v for v in values if isinstance(v, (int, float))]
    return statistics.median(values) if values else None


def fmt(v):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if abs(v) >= 100:
            return f"{v:.0f}"
        return f"{v:.2f}".rstrip("0").rstrip(".") if v != int(v) else f"{v:.0f}"
    if isinstance(v, (list, tuple, set)):
        return ",".join(str(x) for x in v) or "-"
    return str(v)


def compare(c, figure, m, s, unit, tol=None, rel=None, hard=False):
    """A row comparing numbers: `tol` absolute, `rel` relative tolerance; None: info only."""
    if m is None or s is None:
        c.row(figure, m, s, None, "info" if (m is None) == (s is None) else
              ("FAIL" if hard else "check"), unit)
        return
    diff = m - s
    bound = max(tol or 0.0, (rel or 0.0) * abs(s))
    if tol is None and rel is None:
        verdict = "info"
    elif abs(diff) <= bound:
        verdict = "ok"
    else:
        verdict = "FAIL" if hard else "check"
    c.row(figure, m, s, diff, verdict, unit)


def throttle_names(bits):
    names = [n for b, n in THROTTLE_BITS if bits & b]
    known = 0
    for b, _ in THROTTLE_BITS:
        known |= b
    if bits & ~known:
        names.append(hex(bits & ~known))
    return names


def integrate(points):
    """Trapezoid integral of [(t, value)] (value None skipped)."""
    pts = sorted((t, v) for t, v in points if v is not None)
    return sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in zip(pts, pts[1:]))


# ---------------------------------------------------------------- steps


def step_binary(c, montrace):
    # The driver gives the host's pids: in a PID namespace of one's own they are not ours.
    try:
        c.data["pid_namespace"] = os.readlink("/proc/self/ns/pid")
    except OSError as exc:
        c.data["pid_namespace"] = f"unreadable: {exc}"
    print(f"pid namespace: {c.data['pid_namespace']} (the initial one is pid:[4026531836])")
    rc, out, err = run([montrace, "--version"], 15)
    c.data["montrace_version"] = (out + err).strip()
    print(f"montrace: {c.data['montrace_version']}")
    if rc != 0:
        raise RuntimeError(f"`{montrace} --version` exit {rc}: {(out + err).strip()}")


def step_find_gpu(c):
    """nvidia-smi -L and the static figures; False when there is no NVIDIA GPU."""
    if shutil.which("nvidia-smi") is None:
        c.error("gpu", "no NVIDIA GPU found: nvidia-smi is not installed")
        return False
    rc, out, err = run(["nvidia-smi", "-L"], 30)
    c.data["nvidia_smi_L"] = (out + err).strip()
    print(c.data["nvidia_smi_L"])
    if rc != 0 or "GPU " not in out:
        c.error("gpu", f"no NVIDIA GPU found: nvidia-smi -L exit {rc}: {(out + err).strip()}")
        return False
    fields = GPU_FIELDS + GPU_OPTIONAL_FIELDS
    try:
        static = smi_query("gpu", fields, timeout=20)
    except RuntimeError:
        fields = list(GPU_FIELDS)
        for extra in GPU_OPTIONAL_FIELDS:
            try:
                smi_query("gpu", ["index", extra], timeout=10)
                fields.append(extra)
            except RuntimeError:
                c.notes.append(f"nvidia-smi does not know --query-gpu field {extra}")
        static = smi_query("gpu", fields, timeout=20)
    c.data["gpu_fields"] = fields
    c.data["nvidia_smi_static"] = static
    for g in static:
        print("GPU {}: {} {} driver {} memory {} MiB accounting {} MIG {}".format(
            fmt(g.get("index")), g.get("name"), g.get("uuid"), g.get("driver_version"),
            fmt(g.get("memory.total")), g.get("accounting.mode"), g.get("mig.mode.current")))
    return True


def step_doctor(c, montrace):
    rc, out, err = run([montrace, "doctor"], 30)
    c.data["doctor"] = {"exit": rc, "stdout": out, "stderr": err}
    print("---- montrace doctor (exit {}) ----\n{}{}".format(rc, out, err))


def pick_framework(c, forced=None):
    if forced:
        c.data["framework"] = forced
        return forced
    for name in ("torch", "cupy"):
        if importlib.util.find_spec(name) is not None:
            c.data["framework"] = name
            return name
    c.error("workload", "no GPU workload: neither PyTorch (torch) nor CuPy (cupy) is "
            f"importable by {sys.executable}; nvidia-smi-driven load is not enough to check "
            "per-process attribution")
    return None


def montrace_run(c, montrace, run_dir, workload_args, extra, timeout):
    """`montrace run` on the workload; returns (exit, stdout, stderr, seconds)."""
    cmd = [montrace, "run", "-o", run_dir, "-i", "200ms", "--gpu", "require", *extra, "--",
           sys.executable, WORKLOAD, *workload_args]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.time()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=max(5, timeout))
    except subprocess.TimeoutExpired:
        c.error("run", f"montrace run still going after {timeout:.0f} s: SIGTERM")
        p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=8)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
    return p.returncode, out, err, time.time() - t0


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def step_record(c, montrace, work, framework, args):
    """The main run with the pollers beside it."""
    run_dir = os.path.join(work, "run")
    report = os.path.join(work, "workload.json")
    gpu_poll = Poller("gpu", c.data.get("gpu_fields", GPU_FIELDS))
    app_poll = Poller("compute-apps", APP_FIELDS)
    gpu_poll.start()
    app_poll.start()
    try:
        rc, out, err, secs = montrace_run(
            c, montrace, run_dir,
            ["--backend", framework, "--seconds", str(args.seconds), "--mib", str(args.mib),
             "--child-mib", str(args.child_mib), "--report", report],
            [], min(args.seconds + 50, c.left() - 15))
    finally:
        time.sleep(0.5)  # one more nvidia-smi sample after the end
        gpu_poll.stop.set()
        app_poll.stop.set()
        gpu_poll.join(10)
        app_poll.join(10)
    c.data["run"] = {"exit": rc, "seconds": round(secs, 2), "stdout": out, "stderr": err,
                     "dir": run_dir}
    print(f"---- montrace run: exit {rc} in {secs:.1f} s; its stdout ----\n{out}"
          f"---- its stderr ----\n{err}", flush=True)
    c.data["smi_failures"] = gpu_poll.failures + app_poll.failures
    for failure in c.data["smi_failures"]:
        c.notes.append("nvidia-smi poll failed: " + failure[:300])
    c.data["smi_gpu_samples"] = gpu_poll.samples
    c.data["smi_app_samples"] = app_poll.samples
    parent = load_json(report)
    child = load_json(report + ".child")
    c.data["workload"] = {"parent": parent, "child": child}
    if rc != 0:
        c.error("run", f"montrace run exited {rc} (expected 0)")
    if rc == 3 or (parent is None and "no GPU" in err):
        c.error("workload", "the framework found no GPU")
    return run_dir, parent, child


def driver_pid(w):
    """A workload process's pid as the driver gives it (the host's)."""
    return w.get("driver_pid") or w["pid"]


def window_of(parent, child, samples):
    """The steady part: both processes hold their memory. Falls back to the whole poll."""
    ready = [w.get("ready_time") for w in (parent, child) if w]
    ends = [w.get("end_time") for w in (parent, child) if w and w.get("end_time")]
    if ready and ends:
        return max(ready) + 1.0, min(ends) - 0.3
    times = [t for t, _ in samples]
    return (min(times), max(times)) if times else (0, 0)


def step_compare(c, montrace, run_dir, parent, child):
    info = load_json(os.path.join(run_dir, "run.json"))
    if info is None:
        c.error("compare", f"no readable run.json in {run_dir}")
        info = {}
    gpu = info.get("gpu") or {}
    c.data["run_json_gpu"] = gpu
    c.row("run.json gpu.status", gpu.get("status"), "monitored",
          None, "ok" if gpu.get("status") == "monitored" else "FAIL")
    if gpu.get("reason"):
        c.notes.append("run.json gpu.reason: " + str(gpu.get("reason")))
    gpus = c.step("read gpu.parquet", read_table, montrace, run_dir, "gpu") or []
    procs = c.step("read gpu_processes.parquet", read_table, montrace, run_dir,
                   "gpu_processes") or []
    tree = c.step("read processes.parquet", read_table, montrace, run_dir, "processes") or []
    # montrace's own rows, for a reader of the JSON when a comparison below goes wrong
    c.data["montrace_gpu_rows"] = gpus
    c.data["montrace_gpu_process_rows"] = procs
    c.row("gpu.parquet rows", len(gpus), None, None, "ok" if gpus else "FAIL")

    smi_gpu = c.data.get("smi_gpu_samples", [])
    smi_app = c.data.get("smi_app_samples", [])
    lo, hi = window_of(parent, child, smi_gpu)
    c.data["window"] = [lo, hi]
    c.notes.append(f"steady window {hi - lo:.1f} s; montrace rows in it: "
                   f"{sum(1 for r in gpus if r['time'] and lo <= r['time'] <= hi)}, "
                   f"nvidia-smi --query-gpu samples in it: "
                   f"{sum(1 for t, _ in smi_gpu if lo <= t <= hi)}, --query-compute-apps: "
                   f"{sum(1 for t, _ in smi_app if lo <= t <= hi)}")

    # ---- attribution: the workload's pids, the tree's, montrace's, nvidia-smi's
    workload_pids = sorted(driver_pid(w) for w in (parent, child) if w)
    tree_pids = sorted({int(r["pid"]) for r in tree if r.get("pid") is not None})
    sample_rows = [r for r in procs if r.get("source") == "sample"]
    m_pids = sorted({int(r["pid"]) for r in sample_rows})
    s_pids = sorted({int(row["pid"]) for _, rows in smi_app for row in rows
                     if row.get("pid") is not None})
    outside = [p for p in m_pids if p not in tree_pids]
    missing = [p for p in workload_pids if p not in m_pids]
    c.row("pids with GPU memory (tree)", m_pids, s_pids,
          ("missing " + fmt(missing) if missing else "") +
          (" outside the tree " + fmt(outside) if outside else "") or "same",
          "ok" if workload_pids and not missing and not outside else "FAIL")
    c.data["pids"] = {"workload": workload_pids, "tree": tree_pids, "montrace": m_pids,
                      "nvidia_smi": s_pids}

    # ---- per process memory, in the steady window
    uuid_of_index = {}
    for r in gpus:
        uuid_of_index[int(r["gpu_index"])] = r.get("uuid")
    for w in (parent, child):
        if not w:
            continue
        pid = driver_pid(w)
        m = median([r["gpu_memory_bytes"] / MIB for r in sample_rows
                    if int(r["pid"]) == pid and r.get("gpu_memory_bytes") is not None
                    and lo <= r["time"] <= hi])
        s = median([row["used_memory"] for t, rows in smi_app if lo <= t <= hi
                    for row in rows if row.get("pid") == pid])
        compare(c, f"GPU memory of pid {pid} ({w['role']}, holds {w['held_mib']} MiB + "
                f"matrices; torch reserved {w['reserved_bytes'] / MIB:.0f})",
                m, s, "MiB", tol=2.0, hard=True)
        util = mean([r.get("sm_utilization_percent") for r in sample_rows
                     if int(r["pid"]) == pid and lo <= r["time"] <= hi])
        c.row(f"SM utilization of pid {pid} (driver samples)", util, None, None, "info", "%")
        acc = [r for r in procs if r.get("source") == "accounting" and int(r["pid"]) == pid]
        if acc:
            a = acc[0]
            c.row(f"accounting of pid {pid}: max memory",
                  None if a.get("max_gpu_memory_bytes") is None
                  else a["max_gpu_memory_bytes"] / MIB, None, None, "info", "MiB")
            c.row(f"accounting of pid {pid}: lifetime GPU util",
                  a.get("lifetime_gpu_utilization_percent"), None, None, "info", "%")

    # ---- the tree's peak (run.json) against nvidia-smi's largest sum over the tree's pids
    sums = [sum(row["used_memory"] or 0 for row in rows if row.get("pid") in workload_pids)
            for _, rows in smi_app]
    peak = gpu.get("tree_peak_memory_bytes")
    compare(c, "run.json tree_peak_memory_bytes", None if peak is None else peak / MIB,
            max(sums) if sums else None, "MiB", tol=4.0, hard=True)

    # ---- each GPU
    static = {g.get("uuid"): g for g in c.data.get("nvidia_smi_static", [])}
    for dev in gpu.get("devices", []):
        idx, uuid = dev.get("index"), dev.get("uuid")
        st = static.get(uuid, {})
        tag = f"GPU {idx}"
        c.row(f"{tag} name", dev.get("name"), st.get("name"), None,
              "ok" if dev.get("name") == st.get("name") else "FAIL")
        c.row(f"{tag} uuid", uuid, st.get("uuid"), None, "ok" if st else "FAIL")
        total = dev.get("memory_total_bytes")
        compare(c, f"{tag} memory total", None if total is None else total / MIB,
                st.get("memory.total"), "MiB", tol=1.0)
        acc = st.get("accounting.mode")
        c.row(f"{tag} accounting mode", dev.get("accounting_mode"), acc, None,
              "ok" if acc is None or (acc == "Enabled") == dev.get("accounting_mode")
              else "check")
        if "mig.mode.current" in st:
            c.row(f"{tag} MIG mode", None, st.get("mig.mode.current"), None, "info")
        rows = [r for r in gpus if int(r["gpu_index"]) == idx]
        c.row(f"{tag} samples: run.json = gpu.parquet rows", dev.get("samples"), len(rows),
              None, "ok" if dev.get("samples") == len(rows) else "FAIL")
        used = [r["memory_used_bytes"] for r in rows if r.get("memory_used_bytes") is not None]
        c.row(f"{tag} run.json memory_used_max = gpu.parquet max",
              dev.get("memory_used_max_bytes"), max(used) if used else None, None,
              "ok" if dev.get("memory_used_max_bytes") == (max(used) if used else None)
              else "FAIL")
        steady = [r for r in rows if lo <= r["time"] <= hi]
        smi = [(t, g) for t, gs in smi_gpu for g in gs if g.get("uuid") == uuid]
        smi_steady = [g for t, g in smi if lo <= t <= hi]

        def both(col, field, scale=1.0):
            m = median([r[col] * scale for r in steady if r.get(col) is not None])
            s = median([g.get(field) for g in smi_steady])
            return m, s

        m, s = both("memory_used_bytes", "memory.used", 1 / MIB)
        compare(c, f"{tag} memory used (steady median)", m, s, "MiB", tol=4.0)
        m, s = both("utilization_gpu_percent", "utilization.gpu")
        compare(c, f"{tag} utilization (steady median)", m, s, "%", tol=10.0)
        m, s = both("utilization_memory_percent", "utilization.memory")
        compare(c, f"{tag} memory utilization (steady median)", m, s, "%", tol=10.0)
        m, s = both("power_watts", "power.draw")
        compare(c, f"{tag} power (steady median)", m, s, "W", tol=10.0, rel=0.1)
        if any(g.get("power.draw.instant") is not None for g in smi_steady):
            m, s = both("power_watts", "power.draw.instant")
            compare(c, f"{tag} power vs power.draw.instant", m, s, "W", tol=10.0, rel=0.1)
        compare(c, f"{tag} power max (run.json)", dev.get("power_max_watts"),
                max([g.get("power.draw") for _, g in smi if g.get("power.draw") is not None],
                    default=None), "W", rel=0.15)
        m, s = both("temperature_c", "temperature.gpu")
        compare(c, f"{tag} temperature (steady median)", m, s, "C", tol=3.0)
        m, s = both("sm_clock_mhz", "clocks.sm")
        compare(c, f"{tag} SM clock (steady median)", m, s, "MHz", rel=0.05)
        m, s = both("memory_clock_mhz", "clocks.mem")
        compare(c, f"{tag} memory clock (steady median)", m, s, "MHz", rel=0.05)
        # energy: montrace's counter from its first sweep to its last, against nvidia-smi's
        # power integrated over the same span
        times = [r["time"] for r in rows if r.get("energy_joules") is not None]
        if times:
            t0, t1 = min(times), max(times)
            # nvidia-smi's samples start after montrace's first sweep and end before its last:
            # their mean power over the whole span
            s_power = mean([g.get("power.draw") for t, g in smi if t0 <= t <= t1])
            s_energy = None if s_power is None else s_power * (t1 - t0)
            m_power = integrate([(r["time"], r.get("power_watts")) for r in rows])
            compare(c, f"{tag} energy over {t1 - t0:.1f} s (nvidia-smi: mean power x time)",
                    dev.get("energy_joules"), s_energy or None, "J", rel=0.15)
            compare(c, f"{tag} energy vs montrace's own power integrated",
                    dev.get("energy_joules"), m_power or None, "J", rel=0.1)
        else:
            c.row(f"{tag} energy", dev.get("energy_joules"), None, None, "info", "J")
        field = next((f for f in ("clocks_event_reasons.active",
                                  "clocks_throttle_reasons.active") if f in st), None)
        m_names = sorted({n for r in steady for n in (r.get("throttle_reasons") or [])})
        s_names = None
        if field:
            bits = 0
            for g in smi_steady:
                v = g.get(field)
                if isinstance(v, str) and v.startswith("0x"):
                    bits |= int(v, 16)
            s_names = sorted(throttle_names(bits))
        c.row(f"{tag} throttle reasons (steady, union)", m_names, s_names, None,
              "info" if s_names is None else ("ok" if m_names == s_names else "check"))

    # ---- the report
    html = os.path.join(run_dir, "report.html")
    if os.path.exists(html):
        with open(html, errors="replace") as f:
            text = f.read()
        c.row("report.html mentions the GPU", "GPU" in text, True, None,
              "ok" if "GPU" in text else "FAIL")
    else:
        c.row("report.html written", False, True, None, "FAIL")


def step_limit(c, montrace, work, framework, parent):
    """--limit gpu-mem under what the parent holds: exit 124 and the breach in run.json."""
    run_dir = os.path.join(work, "limit")
    limit_mib = max(64, int((parent or {}).get("held_mib", 512)) // 2)
    rc, out, err, secs = montrace_run(
        c, montrace, run_dir,
        ["--backend", framework, "--seconds", "20", "--mib", str(limit_mib * 2),
         "--child-mib", "0", "--report", os.path.join(work, "limit-workload.json")],
        ["--limit", f"gpu-mem={limit_mib}MiB", "--kill-grace", "1s"],
        min(40, c.left() - 5))
    info = load_json(os.path.join(run_dir, "run.json")) or {}
    breach = info.get("limit_breach")
    c.data["limit_run"] = {"exit": rc, "seconds": round(secs, 2), "stderr": err,
                           "breach": breach}
    print(f"---- limit run: exit {rc} in {secs:.1f} s; stderr ----\n{err}", flush=True)
    c.row(f"--limit gpu-mem={limit_mib}MiB: exit status", rc, 124, None,
          "ok" if rc == 124 else "FAIL")
    c.row("  breach in run.json", None if not breach else
          f"{breach.get('limit')} {breach.get('value', 0) / MIB:.0f} MiB", None, None,
          "ok" if breach and breach.get("limit") == "gpu-mem" else "FAIL")


def step_startup(c, montrace, work, n=10):
    """What opening NVML costs a run's start-up: run.json's startup_ms of `/bin/true` with
    --gpu off and --gpu auto (the default), interleaved, medians. montrace opens NVML on a
    thread beside its start-up and takes the monitor once the command runs: auto should cost
    about what off does (`check` beyond 5 ms; a timing, never a failure)."""
    got = {"off": [], "auto": []}
    for i in range(n):
        for mode in ("off", "auto"):
            run_dir = os.path.join(work, f"startup-{mode}-{i:02}")
            rc, _, err = run([montrace, "run", "--quiet", "--no-report", "--gpu", mode,
                              "--out", run_dir, "--", "/bin/true"], min(20, c.left()))
            if rc != 0:
                raise RuntimeError(f"--gpu {mode} run {i + 1}: exit {rc}: {err.strip()}")
            ms = (load_json(os.path.join(run_dir, "run.json")) or {}).get("startup_ms")
            if ms is not None:
                got[mode].append(ms)
            shutil.rmtree(run_dir, ignore_errors=True)
    c.data["startup_ms"] = got
    off, auto = median(got["off"]), median(got["auto"])
    c.row(f"start-up of /bin/true, --gpu off (median of {n})", off, None, None, "info", "ms")
    diff = None if off is None or auto is None else auto - off
    c.row(f"start-up of /bin/true, --gpu auto (median of {n}), diff to off", auto, None, diff,
          "info" if diff is None else "ok" if diff <= 5.0 else "check", "ms")


# ---------------------------------------------------------------- output


def print_table(c):
    headers = ("figure", "montrace", "nvidia-smi", "diff", "verdict")
    lines = []
    for r in c.rows:
        unit = f" {r['unit']}" if r["unit"] and r["montrace"] is not None else ""
        sunit = f" {r['unit']}" if r["unit"] and r["nvidia_smi"] is not None else ""
        diff = r["diff"]
        dtext = fmt(diff) if not isinstance(diff, (int, float)) else f"{diff:+.2f}"
        lines.append((r["figure"], fmt(r["montrace"]) + unit, fmt(r["nvidia_smi"]) + sunit,
                      "" if diff is None else dtext, r["verdict"]))
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
              for i, h in enumerate(headers)]
    widths[0] = min(widths[0], 70)
    out = ["| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for l in lines:
        out.append("| " + " | ".join(x.ljust(w) for x, w in zip(l, widths)) + " |")
    print("\n".join(out))


def finish(c, args, started):
    failed = [r["figure"] for r in c.rows if r["verdict"] == "FAIL"]
    checks = [r["figure"] for r in c.rows if r["verdict"] == "check"]
    if c.exit_code is None:
        c.exit_code = 1 if (failed or c.errors) else 0
    print("\n==== gpu-check: montrace against nvidia-smi ====")
    for g in c.data.get("nvidia_smi_static", []):
        print(f"GPU: {g.get('name')} ({g.get('uuid')}), driver {g.get('driver_version')}")
    if c.rows:
        print_table(c)
    for n in c.notes:
        print("note: " + n)
    for e in c.errors:
        print(f"error: {e['step']}: {e['error'].splitlines()[0]}")
    print(f"gpu-check: {len(failed)} failed, {len(checks)} to check, "
          f"{sum(r['verdict'] == 'ok' for r in c.rows)} ok, {len(c.errors)} errors "
          f"in {time.monotonic() - started:.1f} s; exit {c.exit_code}")
    if args.json:
        doc = {"exit": c.exit_code, "failed": failed, "to_check": checks, "rows": c.rows,
               "errors": c.errors, "notes": c.notes,
               "seconds": round(time.monotonic() - started, 2), **c.data}
        # nvidia-smi's raw samples: kept, but compact
        for key in ("smi_gpu_samples", "smi_app_samples"):
            if key in doc:
                doc[key] = [[round(t, 3), rows] for t, rows in doc[key]]
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
        print(f"gpu-check: wrote {args.json}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--montrace", required=True, help="the montrace binary to check")
    p.add_argument("--json", help="also write the findings here, as JSON")
    p.add_argument("--seconds", type=float, default=12.0, help="how long the workload runs")
    p.add_argument("--mib", type=int, default=1024, help="GPU memory the parent holds")
    p.add_argument("--child-mib", type=int, default=512, help="GPU memory the child holds")
    p.add_argument("--budget", type=float, default=88.0, help="seconds for everything")
    p.add_argument("--keep", help="keep the run directories here (default: a temporary one)")
    p.add_argument("--framework", choices=["torch", "cupy", "nvml-double"],
                   help="the workload's framework (default: torch if importable, else cupy); "
                   "nvml-double: the tests' stand-in, through tests/nvml-double")
    p.add_argument("--no-limit-run", action="store_true", help="skip the --limit gpu-mem run")
    args = p.parse_args()
    started = time.monotonic()
    c = Check(started + args.budget)
    montrace = os.path.abspath(args.montrace)
    work = args.keep or tempfile.mkdtemp(prefix="gpu-check-")
    os.makedirs(work, exist_ok=True)
    c.data["work_dir"] = work
    try:
        check(c, args, montrace, work)
    except KeyboardInterrupt:
        c.error("interrupted", "KeyboardInterrupt")
    finally:
        finish(c, args, started)
    sys.exit(c.exit_code)


def check(c, args, montrace, work):
    c.step("binary", step_binary, c, montrace)
    c.step("doctor", step_doctor, c, montrace)
    if not c.step("gpu", step_find_gpu, c):
        c.exit_code = 2
        return
    framework = pick_framework(c, args.framework)
    if framework is None:
        c.exit_code = 2
        return
    got = c.step("run", step_record, c, montrace, work, framework, args)
    if got is None:
        return
    run_dir, parent, child = got
    c.step("compare", step_compare, c, montrace, run_dir, parent, child)
    if not args.no_limit_run:
        if c.left() < 30:
            c.notes.append(f"--limit gpu-mem run skipped: {c.left():.0f} s left of the budget")
        else:
            c.step("limit", step_limit, c, montrace, work, framework, parent)
    if c.left() < 15:
        c.notes.append(f"start-up runs skipped: {c.left():.0f} s left of the budget")
        return
    c.step("start-up", step_startup, c, montrace, work)


if __name__ == "__main__":
    main()
