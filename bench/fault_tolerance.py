#!/usr/bin/env python3
"""Fault-tolerance benchmark: what a checkpoint costs the step loop, what a failure costs the job.

1. Checkpoint stall, async against sync, side by side (A B A B, median): the
   reference MLP (784-512-512-10, SGD momentum, global batch 128, 1 thread,
   one process) saving every 10 steps with checkpoint.async = true and false.
   The stall is the time the step loop is held per save (summary
   checkpoint_stall_seconds / saves); also the size of one checkpoint and the
   background write bandwidth (bytes / write seconds).
2. Recovery: 2 local workers under `gradmesh launch --max-restarts 3`, a
   worker SIGKILLed at a random moment within 0.8 s (~40 steps) after the
   checkpoints of steps 50, 150 and 250 appear (checkpoint every 50), once restarting every worker from disk
   (elastic.recovery = "restart") and once recovering in process. From the
   run's "restart" events: seconds from the failure (as the launcher saw it)
   to the first step trained again, and steps lost per failure. Both runs are
   checked bit-identical to an uninterrupted one.

usage: bench/fault_tolerance.py [--runs N] [--only stall,recovery]
"""
import argparse, json, os, random, signal, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
MLP = os.path.join(ROOT, "examples", "mlp.toml")
STALL_TARGET = 0.10  # async stall <= 10% of the synchronous save


def metrics(run_dir, kind):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [j for j in map(json.loads, f) if j["type"] == kind]


def stall_run(async_save):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [GRADMESH, "train", MLP, "--set", "train.threads=1", "--set", f"output.dir={tmp}",
               "--set", "output.run_id=r", "--set", "output.report=false", "--set", "output.trace_steps=0",
               "--set", "output.save_weights=false", "--set", "train.eval_every_epoch=false",
               "--set", "train.max_steps=200", "--set", "checkpoint.every_steps=10", "--set", "checkpoint.keep_last=2",
               "--set", f"checkpoint.async={'true' if async_save else 'false'}"]
        out = subprocess.run(cmd, env=dict(os.environ, GRADMESH_PROGRESS="off"), capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
        s = metrics(os.path.join(tmp, "r"), "summary")[-1]
    saves = s["checkpoints_saved"]
    return {"stall_ms": s["checkpoint_stall_seconds"] / saves * 1e3, "bytes": s["checkpoint_bytes"] / saves,
            "write_s": s["checkpoint_write_seconds"] / saves, "samples_per_s": s["samples_per_s"]}


def bench_stall(runs):
    rows = {True: [], False: []}
    for _ in range(runs):
        for mode in (True, False):
            rows[mode].append(stall_run(mode))
    med = {m: {k: statistics.median(r[k] for r in rows[m]) for k in rows[m][0]} for m in rows}
    ratio = med[True]["stall_ms"] / med[False]["stall_ms"]
    print("\n### Checkpoint stall (reference MLP, 1 process, 1 thread, save every 10 steps; median of %d)\n" % runs)
    print("| mode | loop stall per save | checkpoint size | write time per save | write bandwidth | samples/s |")
    print("|---|---|---|---|---|---|")
    for mode in (False, True):
        m = med[mode]
        print(f"| {'async (snapshot, background write)' if mode else 'sync (write in the loop)'} | {m['stall_ms']:.2f} ms "
              f"| {m['bytes'] / 1e6:.2f} MB | {m['write_s'] * 1e3:.1f} ms | {m['bytes'] / m['write_s'] / 1e6:.0f} MB/s "
              f"| {m['samples_per_s']:,.0f} |")
    verdict = "met" if ratio <= STALL_TARGET else "MISSED"
    print(f"\nasync stall / sync stall = {ratio:.3f} (target <= {STALL_TARGET}: {verdict})")


def workers_of(launcher):
    out = subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def newest_step(checkpoints):
    try:
        names = os.listdir(checkpoints)
    except FileNotFoundError:
        return -1
    steps = [int(n[5:]) for n in names if n.startswith("step-") and "." not in n]
    return max(steps, default=-1)


def chaos_run(tmp, run_id, recovery, kills, seed):
    cmd = [GRADMESH, "launch", "--nproc-per-node", "2", "--max-restarts", str(len(kills)), "--rdzv-id", run_id, "--",
           GRADMESH, "train", MLP, "--set", "train.threads=1", "--set", f"output.dir={tmp}",
           "--set", f"output.run_id={run_id}", "--set", "model.hidden=[1024,1024]", "--set", "data.limit_train=38400",
           "--set", "data.limit_test=1000", "--set", "train.log_every=10", "--set", "output.report=false",
           "--set", "output.trace_steps=0", "--set", "checkpoint.every_steps=50", "--set", "checkpoint.keep_last=0",
           "--set", f"elastic.recovery={recovery}"]
    log = open(os.path.join(tmp, run_id + ".log"), "w")
    # Heartbeats every 0.1 s: steps_lost counts the steps the heartbeats reported before the kill.
    env = dict(os.environ, GRADMESH_PROGRESS="off", GRADMESH_HEARTBEAT_INTERVAL="0.1")
    launcher = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
    rng = random.Random(seed)
    checkpoints = os.path.join(tmp, run_id, "checkpoints")
    for step in kills:
        deadline = time.time() + 300
        while newest_step(checkpoints) < step and time.time() < deadline:
            time.sleep(0.005)
        time.sleep(rng.random() * 0.8)  # a random step before the next checkpoint (~50 steps/s)
        workers = workers_of(launcher.pid)
        if workers:
            os.kill(rng.choice(workers), signal.SIGKILL)
    if launcher.wait(timeout=600) != 0:
        sys.exit(f"launcher failed; see {log.name}:\n" + open(log.name).read()[-3000:])
    run_dir = os.path.join(tmp, run_id)
    with open(os.path.join(run_dir, "model.safetensors"), "rb") as f:
        weights = f.read()
    return metrics(run_dir, "restart"), weights


def bench_recovery(runs):
    kills = [50, 150, 250]
    with tempfile.TemporaryDirectory() as tmp:
        _, expected = chaos_run(tmp, "baseline", "restart", [], 0)
        results = {"restart": [], "in-process": []}
        for i in range(runs):
            for mode in results:
                events, weights = chaos_run(tmp, f"{mode}-{i}", mode, kills, 100 + i)
                if weights != expected:
                    sys.exit(f"{mode} run {i}: final weights differ from the uninterrupted run")
                results[mode] += events
    print("\n### Recovery (2 local workers, shm, wide MLP 784-1024-1024-10, checkpoint every 50 steps, "
          f"{len(kills)} SIGKILLs per run, {runs} run(s) per mode; final weights bit-identical to the uninterrupted run)\n")
    print("| recovery | failures | seconds from kill to training again (median, max) | steps lost per failure (median, max) |")
    print("|---|---|---|---|")
    for mode, events in results.items():
        secs = [e["seconds_to_first_step"] for e in events]
        lost = [e.get("steps_lost", -1) for e in events]
        print(f"| {mode} | {len(events)} | {statistics.median(secs):.2f} s, {max(secs):.2f} s "
              f"| {statistics.median(lost):.0f}, {max(lost)} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", default="stall,recovery")
    a = ap.parse_args()
    parts = a.only.split(",")
    print(f"machine: {os.cpu_count()} CPUs; gradmesh {GRADMESH}")
    if "stall" in parts:
        bench_stall(a.runs)
    if "recovery" in parts:
        bench_recovery(max(1, a.runs // 2))


if __name__ == "__main__":
    main()
