"""Time a command on a shared machine, keeping only runs nobody else disturbed.

    python3 scripts/time_when_quiet.py RUNS COMMAND [ARGS...]

Waits for a quiet second (under 0.15 CPU-seconds busy), runs COMMAND under
/usr/bin/time, and compares the CPU time the whole machine spent during the
run (/proc/stat) with the command's own: a run where other processes used
more than a quarter of the wall time is printed as `contended` and does not
count. Stops after RUNS clean runs (or after 10×RUNS attempts).
"""

import os
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def busy_seconds():
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return (sum(v) - v[3] - v[4]) / HZ


def main():
    runs, cmd = int(sys.argv[1]), sys.argv[2:]
    clean = 0
    for _ in range(runs * 10):
        b = busy_seconds()
        time.sleep(1.0)
        if busy_seconds() - b > 0.15:
            continue
        b0 = busy_seconds()
        p = subprocess.run(
            ["/usr/bin/time", "-f", "%e %U %S %M"] + cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        b1 = busy_seconds()
        wall, user, sys_, rss = p.stderr.strip().splitlines()[-1].split()
        other = (b1 - b0) - float(user) - float(sys_)
        ok = other < 0.25 * float(wall)
        print(
            f"{'clean' if ok else 'contended'}: wall {wall} s, user {user} s, sys {sys_} s, "
            f"max RSS {int(rss) / 1024:.0f} MiB, other processes' CPU during the run {other:.2f} s, "
            f"exit {p.returncode}",
            flush=True,
        )
        clean += ok
        if clean >= runs:
            break


if __name__ == "__main__":
    main()
