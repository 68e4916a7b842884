"""psrecord_run.py OUT LOG INTERVAL CMD ARGS...

Runs CMD under psrecord's own sampling loop (`psrecord.main.monitor`, the loop that
`psrecord --include-children --interval INTERVAL --log LOG --log-format csv` runs; CMD is started
here without a shell in between) and writes to OUT what psrecord made of it:

  processes_seen  distinct processes psrecord ever sampled: the root and every child it found
                  (psrecord keeps them in `psrecord.main.children`)
  cpu_s           the tree's CPU seconds according to psrecord: its CPU % column integrated over
                  the time between samples
  peak_mib        its largest "Real (MB)" value (MiB: the sum of the tree's RSS at one sample)
  samples         rows in its log

Part of `cargo xtask bench`.
"""

import csv
import importlib
import json
import subprocess
import sys

# `psrecord/__init__.py` binds the name `main` to the function, so import the module by its name.
psrecord = importlib.import_module("psrecord.main")


def main():
    out, log, interval, cmd = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    psrecord.monitor(proc.pid, logfile=log, interval=interval, include_children=True, log_format="csv")
    status = proc.wait()
    with open(log) as f:
        rows = [r for r in csv.DictReader(f)]
    cpu_s, previous = 0.0, 0.0
    for row in rows:
        t = float(row["elapsed_time"])
        cpu_s += float(row["cpu"]) / 100.0 * (t - previous)
        previous = t
    result = {
        # psrecord adds a child only when it is not in the list yet (psutil compares pid and
        # creation time), so the list holds each process once.
        "processes_seen": 1 + len(psrecord.children),
        "cpu_s": cpu_s,
        "peak_mib": max((float(r["mem_real"]) for r in rows), default=0.0),
        "samples": len(rows),
        "status": status,
    }
    with open(out, "w") as f:
        json.dump(result, f)
    sys.exit(0 if status == 0 else 1)


if __name__ == "__main__":
    main()
