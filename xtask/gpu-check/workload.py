"""The GPU workload `gpu_check.py` records: a parent and a child process, each holding a known
amount of GPU memory and running matrix products until a deadline, through PyTorch or CuPy.

    python3 workload.py --backend torch|cupy --seconds S --mib N --child-mib M --report PATH

The parent starts the child (the same script, `--role child`), then both allocate, write
`PATH` (parent) / `PATH.child` (child) as JSON (pid, what they hold, when they were ready) and
loop until the deadline. Exit status: 0, or 3 when the framework finds no GPU.
"""

import argparse
import json
import os
import subprocess
import sys
import time


def hold_and_compute(backend, mib, seconds, deadline):
    """Allocates `mib` MiB and two 4096x4096 float32 matrices; returns (report, loop)."""
    n = 4096
    if backend == "torch":
        import torch

        if not torch.cuda.is_available():
            print("workload: torch.cuda.is_available() is False", file=sys.stderr)
            sys.exit(3)
        dev = torch.device("cuda:0")
        held = torch.ones(mib * 1024 * 1024, dtype=torch.uint8, device=dev)
        a = torch.randn(n, n, device=dev)
        b = torch.randn(n, n, device=dev)
        torch.cuda.synchronize()
        info = {
            "framework": "torch " + torch.__version__,
            "device": torch.cuda.get_device_name(0),
            "allocated_bytes": int(torch.cuda.memory_allocated(0)),
            "reserved_bytes": int(torch.cuda.memory_reserved(0)),
        }

        def step():
            c = a @ b
            torch.cuda.synchronize()
            return c

    elif backend == "nvml-double":
        return hold_in_the_double(mib)
    else:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            print("workload: CuPy finds no GPU", file=sys.stderr)
            sys.exit(3)
        held = cupy.ones(mib * 1024 * 1024, dtype=cupy.uint8)
        a = cupy.random.standard_normal((n, n), dtype=cupy.float32)
        b = cupy.random.standard_normal((n, n), dtype=cupy.float32)
        cupy.cuda.Device(0).synchronize()
        pool = cupy.get_default_memory_pool()
        info = {
            "framework": "cupy " + cupy.__version__,
            "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
            "allocated_bytes": int(pool.used_bytes()),
            "reserved_bytes": int(pool.total_bytes()),
        }

        def step():
            c = a @ b
            cupy.cuda.Device(0).synchronize()
            return c

    info["held_mib"] = mib
    info["ready_time"] = time.time()
    return info, held, step


def edit_double(change):
    """Rewrites the NVML double's script ($NVML_DOUBLE_CONFIG) under a lock, atomically."""
    import fcntl

    path = os.environ["NVML_DOUBLE_CONFIG"]
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(path) as f:
            cfg = json.load(f)
        change(cfg)
        with open(path + ".tmp", "w") as f:
            json.dump(cfg, f)
        os.replace(path + ".tmp", path)


def driver_pid():
    """This process's pid as the NVIDIA driver gives it: in the initial PID namespace (the
    first NSpid of /proc/self/status, where /proc is the host's), whatever namespace we are in."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return os.getpid()


def hold_in_the_double(mib):
    """The tests' stand-in for a framework: this process appears in the NVML double's process
    list of GPU 0 with `mib` MiB (plus 500 MiB of context), and the GPU's memory grows as much."""
    pid = driver_pid()
    used = (mib + 500) * 1024 * 1024

    def add(cfg):
        dev = cfg["devices"][0]
        dev.setdefault("compute", []).append({"pid": pid, "used": used})
        dev["memory_used"] = dev.get("memory_used", 0) + used

    def remove(cfg):
        dev = cfg["devices"][0]
        dev["compute"] = [p for p in dev.get("compute", []) if p["pid"] != pid]
        dev["memory_used"] = dev.get("memory_used", 0) - used

    edit_double(add)
    import atexit
    import signal

    atexit.register(edit_double, remove)
    # A stopped tree (--limit) leaves the list as a real driver does once the context is gone.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    info = {"framework": "nvml-double", "device": "nvml-double",
            "allocated_bytes": mib * 1024 * 1024, "reserved_bytes": mib * 1024 * 1024,
            "held_mib": mib, "driver_pid": pid, "ready_time": time.time()}
    return info, None, lambda: time.sleep(0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=["torch", "cupy", "nvml-double"], required=True)
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--mib", type=int, default=1024)
    p.add_argument("--child-mib", type=int, default=512)
    p.add_argument("--report", required=True)
    p.add_argument("--role", choices=["parent", "child"], default="parent")
    p.add_argument("--deadline", type=float, default=None)
    args = p.parse_args()

    deadline = args.deadline or (time.time() + args.seconds)
    child = None
    if args.role == "parent" and args.child_mib > 0:
        child = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--backend", args.backend,
                "--mib", str(args.child_mib),
                "--report", args.report + ".child",
                "--role", "child",
                "--deadline", str(deadline),
            ]
        )
    info, held, step = hold_and_compute(args.backend, args.mib, args.seconds, deadline)
    info["pid"] = os.getpid()
    info["role"] = args.role
    info["child_pid"] = child.pid if child else None
    path = args.report
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)
    steps = 0
    while time.time() < deadline:
        step()
        steps += 1
    info["steps"] = steps
    info["end_time"] = time.time()
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.replace(path + ".tmp", path)
    del held
    status = 0
    if child is not None:
        status = child.wait()
    sys.exit(status)


if __name__ == "__main__":
    main()
