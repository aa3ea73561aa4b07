#!/usr/bin/env python3
"""Straggler benchmark: one of two workers throttled, with and without parallel.straggler = "rebalance".

The CNN reference workload (examples/cnn.toml, one epoch, global batch 128,
drop_last: 468 steps, evaluation off) on 2 workers under
`gradmesh train --nproc-per-node 2` over shared memory, one thread per worker.
Rank 1 is throttled from outside the process to half a core: a child cgroup
with cpu.max = "2500 5000" (cgroup v2) or cpu.cfs_quota_us = 2500 per
5000 us (cgroup v1 cpu controller), whichever is writable here, else a
SIGSTOP/SIGCONT duty cycle (20 ms stopped, 20 ms running).

Runs, alternating run after run: unthrottled with straggler = "none",
throttled "none", throttled "rebalance". Reports the median samples/s of each
(from the run's summary line in metrics.jsonl), the ratio throttled-rebalance
/ throttled-none (target >= 1.3x) and the last shares the balancer chose.

usage: bench/straggler.py [--runs N] [--steps N] [--log-every N] [--throttle auto|sigstop]

A CPU quota slows a rank only while it is saturated (given less work it runs
at full speed), while the duty cycle stops it half of the wall time whatever
its load, like a machine half as fast: --throttle sigstop measures that case.
"""
import argparse, json, os, signal, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
TARGET = 1.3  # throttled rebalance / throttled none
# Half a core in 5 ms periods: about three periods per ~15 ms CNN step, the
# closest a quota comes to a core half as fast. With 10 ms periods a step
# spans 1.5 periods and the stop lands in compute or in the all-reduce from
# step to step; with 100 ms periods the rank stops for 50 ms, longer than
# several steps, which no split of a synchronous step can hide
# (--period-us 10000 / 100000 show both).
QUOTA_US, PERIOD_US = 2500, 5000


def find_rank_pid(tag, rank, timeout_s=30.0):
    """Pid of the worker with RANK=rank among the processes carrying our unique tag in their environment."""
    deadline = time.monotonic() + timeout_s
    want = {f"GRADMESH_BENCH_TAG={tag}".encode(), f"RANK={rank}".encode()}
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = set(f.read().split(b"\0"))
            except OSError:
                continue
            if want <= env:
                return int(pid)
        time.sleep(0.01)
    sys.exit(f"no worker with RANK={rank} appeared within {timeout_s:.0f} s")


def cgroup_dirs():
    """(kind, directory in which to create a child cgroup) for every cpu-capable hierarchy here."""
    out = []
    for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        try:
            with open(os.path.join(base, "cgroup.controllers")) as f:
                if "cpu" in f.read().split():
                    out.append(("v2", base))
        except OSError:
            pass
    if os.path.exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"):
        out.append(("v1", "/sys/fs/cgroup/cpu"))
    return out


class Throttle:
    """Caps one process at half a core: cgroup v2, else cgroup v1, else a SIGSTOP/SIGCONT duty cycle."""

    def __init__(self, method="auto", period_us=PERIOD_US):
        self.method, self.dir = None, None
        self.period_us, self.quota_us = period_us, period_us // 2
        for kind, base in cgroup_dirs() if method == "auto" else []:
            path = os.path.join(base, f"gradmesh-straggler-{os.getpid()}")
            try:
                os.makedirs(path, exist_ok=True)
                if kind == "v2":
                    with open(os.path.join(path, "cpu.max"), "w") as f:
                        f.write(f"{self.quota_us} {self.period_us}")
                else:
                    with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
                        f.write(str(self.period_us))
                    with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
                        f.write(str(self.quota_us))
                self.method, self.dir = kind, path
                break
            except OSError:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
        if self.method is None:
            self.method = "sigstop"

    def describe(self):
        if self.method == "v2":
            return f'cgroup v2 cpu.max = "{self.quota_us} {self.period_us}" (half a core)'
        if self.method == "v1":
            return f"cgroup v1 cpu.cfs_quota_us = {self.quota_us} per cpu.cfs_period_us = {self.period_us} (half a core)"
        return "SIGSTOP/SIGCONT duty cycle, 20 ms stopped / 20 ms running"

    def apply(self, pid, stop_event):
        """Throttles pid until it exits (cgroup) or stop_event is set (duty cycle, run on a thread)."""
        if self.method in ("v1", "v2"):
            with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
                f.write(str(pid))  # moves every thread of the process
            return None

        def duty():
            while not stop_event.is_set():
                try:
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(0.02)
                    os.kill(pid, signal.SIGCONT)
                    time.sleep(0.02)
                except ProcessLookupError:
                    return
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

        t = threading.Thread(target=duty, daemon=True)
        t.start()
        return t

    def close(self):
        if self.dir:
            try:
                os.rmdir(self.dir)
            except OSError:
                pass


def run_once(args, throttle, straggler):
    """(samples/s, steps, last rebalance shares or None, slow_rank phases) of one 2-worker run."""
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [GRADMESH, "train", os.path.join(ROOT, "examples", "cnn.toml"), "--nproc-per-node", "2",
               "--set", "train.threads=1", "--set", "parallel.backend=shm", "--set", f"parallel.straggler={straggler}",
               "--set", f"train.max_steps={args.steps}", "--set", f"train.epochs={-(-args.steps // 468)}",
               "--set", f"train.log_every={args.log_every}",
               "--set", "train.eval_every_epoch=false", "--set", f"output.dir={tmp}",
               "--set", "output.save_weights=false", "--set", "output.report=false", "--set", "output.trace_steps=0"]
        env = dict(os.environ, GRADMESH_PROGRESS="off", GRADMESH_BENCH_TAG=tag)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        stop = threading.Event()
        duty = throttle.apply(find_rank_pid(tag, 1), stop) if throttle else None
        out, _ = proc.communicate()
        stop.set()
        if duty:
            duty.join()
        if proc.returncode != 0:
            sys.exit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{out[-2000:]}")
        (run_dir,) = os.listdir(tmp)
        with open(os.path.join(tmp, run_dir, "metrics.jsonl")) as f:
            lines = [json.loads(l) for l in f]
    summary = [l for l in lines if l["type"] == "summary"][-1]
    shares = [l["shares"] for l in lines if l["type"] == "rebalance"]
    phases = sorted({l.get("phase", "?") for l in lines if l["type"] == "slow_rank"})
    return summary["samples_per_s"], summary["steps"], shares[-1] if shares else None, phases


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--steps", type=int, default=468, help="train.max_steps (468 = one epoch; more run more epochs)")
    p.add_argument("--log-every", type=int, default=20, help="train.log_every (the balancer decides every parallel.rebalance_every = 5 steps)")
    p.add_argument("--throttle", choices=("auto", "sigstop"), default="auto",
                   help="auto: a cgroup CPU quota where writable, else the duty cycle")
    p.add_argument("--period-us", type=int, default=PERIOD_US,
                   help="CPU quota period (quota = half of it): a period shorter than a step (~15 ms here) "
                        "approximates a half-speed core, a longer one alternates full speed and stopped")
    a = p.parse_args()
    throttle = Throttle(a.throttle, a.period_us)
    rows = {"none": [], "throttled none": [], "throttled rebalance": []}
    try:
        for _ in range(a.runs):
            rows["none"].append(run_once(a, None, "none"))
            rows["throttled none"].append(run_once(a, throttle, "none"))
            rows["throttled rebalance"].append(run_once(a, throttle, "rebalance"))
            print("  " + "; ".join(f"{k} {round(v[-1][0])}" for k, v in rows.items()), file=sys.stderr)
    finally:
        throttle.close()
    med = {k: statistics.median(r[0] for r in v) for k, v in rows.items()}
    steps = rows["none"][0][1]
    setup = (f"CNN (examples/cnn.toml), {steps} steps of global batch 128, evaluation off; 2 workers "
             f"(gradmesh train --nproc-per-node 2), parallel.backend = shm, train.threads = 1, "
             f"train.log_every = {a.log_every}; machine: {os.cpu_count()} cores, workers not pinned")
    print(f"setup: {setup}")
    print(f"throttle of rank 1: {throttle.describe()}")
    print(f"{a.runs} alternating runs of each row, medians")
    print()
    print("| run | rank 1 | parallel.straggler | samples/s (median) | runs | final shares | slow_rank phase |")
    print("|---|---|---|---|---|---|---|")
    for name, label, straggler in (("none", "full speed", "none"), ("throttled none", "throttled", "none"),
                                   ("throttled rebalance", "throttled", "rebalance")):
        last = rows[name][-1]
        shares = "/".join(f"{s:.2f}" for s in last[2]) if last[2] else "0.50/0.50"
        print(f"| {name} | {label} | {straggler} | {med[name]:,.0f} | "
              f"{', '.join(str(round(r[0])) for r in rows[name])} | {shares} | {', '.join(last[3]) or '-'} |")
    ratio = med["throttled rebalance"] / med["throttled none"]
    print()
    print(f"throttled rebalance / throttled none: {ratio:.2f}x (target >= {TARGET}x: "
          f"{'met' if ratio >= TARGET else 'MISSED'}); throttled rebalance / unthrottled: "
          f"{med['throttled rebalance'] / med['none']:.2f}x")


if __name__ == "__main__":
    main()
