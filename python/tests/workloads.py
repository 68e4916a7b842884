"""Functions the tests run under montrace.monitored."""
import subprocess


def spawn_true(n: int) -> int:
    for _ in range(n):
        subprocess.run(["/bin/true"], check=True)
    return n


def allocate(mib: int) -> int:
    block = bytearray(mib * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    import time

    time.sleep(30)
    return len(block)


def crash(n: int) -> None:
    raise ValueError(f"boom {n}")


def allocate_briefly(mib: int) -> int:
    block = bytearray(mib * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    import time

    time.sleep(0.4)
    return len(block)
