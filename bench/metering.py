#!/usr/bin/env python3
"""What the reference runs cost, as gradmesh meters them.

Runs the reference MLP (3 epochs, as `make demo`) and the reference CNN (its
config's 1 epoch) with 2 workers on this host (shm), and, as root, the same
two across two emulated hosts (network namespaces joined by a veth pair
rate-limited to --rate with `tc tbf`, one worker each, gloo, a Redis store),
where the gradients become billable egress (and once more with PowerSGD,
which sends a fraction of them). Each run takes a checkpoint
every 200 steps. Prints, per run, the last usage line of its metrics.jsonl:
core-seconds, bytes, the cost by kind at the [metering] prices (the built-in
examples unless --set gives others), and what metering itself took per log
interval against the interval's length.

usage: bench/metering.py [--rate 1gbit] [--local-only] [--set metering.price_per_core_hour=0.03 ...]
"""
import argparse, json, os, shutil, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_netns import GRADMESH, ROOT, TwoHosts, run_two_nodes  # noqa: E402

COMMON = ["checkpoint.every_steps=200", "output.trace_steps=0"]
RUNS = [("reference MLP, 3 epochs", "mlp.toml", ["train.epochs=3"]),
        ("reference CNN, 1 epoch", "cnn.toml", [])]
# Across hosts the gradients are egress: PowerSGD (docs/scaling.md) is what cuts that bill.
CROSS_ONLY = [("reference MLP, 3 epochs, PowerSGD rank 4", "mlp.toml",
               ["train.epochs=3", "parallel.compression=powersgd"])]


def local_run(config, sets, workdir, run_id):
    cmd = [GRADMESH, "train", os.path.join(ROOT, "examples", config), "--nproc-per-node", "2",
           "--set", f"output.dir={workdir}", "--set", f"output.run_id={run_id}"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, GRADMESH_PROGRESS="off"))
    if out.returncode != 0:
        raise RuntimeError(f"{run_id} exited {out.returncode}:\n{out.stdout[-3000:]}")
    with open(os.path.join(workdir, run_id, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def summarise(lines):
    usage = [l for l in lines if l["type"] == "usage"]
    steps = [l for l in lines if l["type"] == "step"]
    summary = next(l for l in lines if l["type"] == "summary")
    u = usage[-1]
    # Metering's own time against the log intervals it ran in (the step lines' spacing).
    interval_s = [b["time"] - a["time"] for a, b in zip(steps, steps[1:])]
    mean_interval = sum(interval_s) / len(interval_s) if interval_s else float("nan")
    metering = [x["metering_ms"] for x in usage[:-1]]
    return u, summary, sum(metering) / max(len(metering), 1), mean_interval * 1e3


def mb(x):
    return f"{x / 1e6:,.1f} MB"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--local-only", action="store_true")
    p.add_argument("--set", action="append", default=[], help="a config override for every run (prices)")
    a = p.parse_args()
    cross = not a.local_only
    if cross and os.geteuid() != 0:
        sys.exit("bench/metering.py needs root for the two emulated hosts (or --local-only)")
    rows = []
    workdir = tempfile.mkdtemp(prefix="gm_metering_")
    try:
        for label, config, sets in RUNS:
            lines = local_run(config, COMMON + sets + a.set, workdir, f"local-{config[:3]}")
            rows.append((label, "1 host, 2 workers, shm", *summarise(lines)))
        if cross:
            hosts = TwoHosts(a.rate, workdir)
            try:
                hosts.open()
                for i, (label, config, sets) in enumerate(RUNS + CROSS_ONLY):
                    lines = run_two_nodes(hosts, f"netns-{i}", COMMON + sets + a.set, workdir,
                                          timeout=3600, config=config)
                    rows.append((label, f"2 emulated hosts ({a.rate}), 1 worker each, gloo", *summarise(lines)))
            finally:
                hosts.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    prices = rows[0][2]["prices"]
    cur = rows[0][2]["currency"]
    print(f"Prices ({'the built-in examples' if rows[0][2]['example_prices'] else 'from --set'}): "
          f"{prices['core_hour']} {cur} per core-hour, {prices['storage_gb_month']} {cur} per GB-month of "
          f"checkpoints, {prices['egress_gb']} {cur} per GB sent between hosts\n")
    print("| run | setup | samples/s | test accuracy | core-seconds | sent (all ranks) | sent between hosts "
          "| checkpoints kept | compute | storage | egress | total | metering per interval |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, setup, u, s, metering_ms, interval_ms in rows:
        t, c = u["totals"], u["cost"]
        print(f"| {label} | {setup} | {s['samples_per_s']:,.0f} | {s.get('test_accuracy', float('nan')):.4f} "
              f"| {t['cpu_seconds']:.1f} | {mb(t['sent_bytes'])} | {mb(t['inter_host_bytes'])} "
              f"| {mb(t['checkpoint_stored_bytes'])} | {c['compute']:.6f} | {c['storage']:.2e} | {c['egress']:.6f} "
              f"| {c['total']:.6f} {cur} | {metering_ms:.2f} ms of {interval_ms:.0f} ms "
              f"({metering_ms / interval_ms * 100:.2f}%) |")


if __name__ == "__main__":
    main()
