#!/usr/bin/env python3
"""Engine benchmark: gradmesh against PyTorch on the reference workloads, side by side.

Runs each pair A B A B ... (alternating, same machine, same moment) and reports
medians and the ratio ours / anchor. The "1 thread" rows pin both processes
to one core (taskset -c 0): unpinned, gradmesh's loader thread would quietly
run on the second core while PyTorch computes and loads on one. Also measures
OpenBLAS sgemm in the same run and reports the MLP's achieved GEMM GFLOP/s at
batch 512 (pinned the same way) as a fraction of it.

The MLP's test accuracy is also compared over several seeds (--seeds N): one
run's accuracy varies by about +-0.01 with the seed on both sides, so the
medians over seeds 0..N-1 say more than seed 0 alone. The anchor's seed is
changed in a temporary copy of the script (torch.manual_seed and the per-epoch
shuffle generator).

usage: bench/engine.py [--runs N] [--seeds N] [--anchors DIR] [--only mlp1,mlp2,cnn1,cnn2,gemm,seeds]
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
PIN_ONE_CORE = ["taskset", "-c", "0"]


def pinning(threads):
    """The command prefix that gives a run as many cores as it has threads: one thread, one core."""
    return PIN_ONE_CORE if threads == 1 else []


def pinning_label(threads):
    return "taskset -c 0 (both)" if threads == 1 else f"none ({os.cpu_count()} cores)"


def run(cmd, env=None):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        sys.exit(f"benchmark command failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-2000:]}")
    return out.stdout


def ours(kind, threads, batch=128, epochs=1, seed=0):
    with tempfile.TemporaryDirectory() as tmp:
        run(pinning(threads) + [GRADMESH, "train", os.path.join(ROOT, "examples", f"{kind}.toml"),
             "--set", f"train.threads={threads}", "--set", f"train.batch_size={batch}", "--set", f"train.epochs={epochs}", "--set", f"output.dir={tmp}",
             "--set", "output.save_weights=false", "--set", f"train.seed={seed}", "--set", "output.report=false",
             "--set", "output.trace_steps=0"], env=dict(os.environ, GRADMESH_PROGRESS="off"))
        (run_dir,) = os.listdir(tmp)
        with open(os.path.join(tmp, run_dir, "metrics.jsonl")) as f:
            summary = [json.loads(l) for l in f if '"summary"' in l][-1]
    return summary["samples_per_s"], summary.get("test_accuracy", float("nan")), summary["gemm_gflops_per_s"]


def torch(anchors, kind, threads, seed=0):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    script = os.path.join(anchors, "torch_fmnist.py")
    with tempfile.TemporaryDirectory() as tmp:
        if seed != 0:  # the anchor hard-codes seed 0: run a copy with the seed changed
            with open(script) as f:
                text = f.read()
            patched = text.replace("torch.manual_seed(0)", f"torch.manual_seed({seed})").replace(
                "manual_seed(ep)", f"manual_seed(ep + 1000 * {seed})")
            if "torch.manual_seed(0)" not in text or "manual_seed(ep)" not in text:
                sys.exit("cannot set the anchor's seed: torch_fmnist.py changed")
            script = os.path.join(tmp, "torch_fmnist.py")
            with open(script, "w") as f:
                f.write(patched)
        out = run(pinning(threads) + [sys.executable if sys.executable.startswith("/usr/bin") else "/usr/bin/python3",
                   script, kind, "1", "128"], env=env)
    m = re.search(r"samples/s=(\d+) test_acc=([0-9.]+)", out)
    if not m:
        sys.exit(f"cannot parse the anchor's output:\n{out}")
    return float(m.group(1)), float(m.group(2))


def gemm_peak(threads):
    out = json.loads(run(pinning(threads) + [GRADMESH, "bench", "gemm", "--n", "2048", "--threads", str(threads),
                                             "--json"]))
    return out["gflops"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--anchors", default=os.path.join(ROOT, "..", "shared", "anchors"))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--only", default="mlp1,mlp2,cnn1,cnn2,gemm,seeds")
    a = p.parse_args()
    if not os.path.exists(os.path.join(a.anchors, "torch_fmnist.py")):
        sys.exit(f"anchor scripts not found in {a.anchors} (pass --anchors DIR)")
    wanted = a.only.split(",")
    rows = []
    for name, kind, threads, target in [("mlp1", "mlp", 1, 1.1), ("mlp2", "mlp", 2, None),
                                         ("cnn1", "cnn", 1, 2.0), ("cnn2", "cnn", 2, None)]:
        if name not in wanted:
            continue
        o, t = [], []
        for _ in range(a.runs):
            o.append(ours(kind, threads))
            t.append(torch(a.anchors, kind, threads))
        o_sps = statistics.median(x[0] for x in o)
        t_sps = statistics.median(x[0] for x in t)
        o_acc = statistics.median(x[1] for x in o)
        t_acc = statistics.median(x[1] for x in t)
        rows.append((f"{kind.upper()} {threads} thread{'s' if threads > 1 else ''}", pinning_label(threads),
                     o_sps, t_sps, o_acc, t_acc, target))
        print(f"  {name}: ours {[round(x[0]) for x in o]} torch {[round(x[0]) for x in t]}", file=sys.stderr)
    print(f"machine: {os.cpu_count()} cores; {a.runs} alternating runs each, medians; "
          f"anchor: PyTorch (Debian python3-torch), OMP_NUM_THREADS = threads; ours: train.threads = threads")
    print()
    print("| workload | cores (pinning) | gradmesh samples/s | PyTorch samples/s | ratio | target | gradmesh acc "
          "| PyTorch acc |")
    print("|---|---|---|---|---|---|---|---|")
    for label, pinned, o_sps, t_sps, o_acc, t_acc, target in rows:
        verdict = "" if target is None else (f">= {target}x " + ("met" if o_sps / t_sps >= target else "MISSED"))
        print(f"| {label} | {pinned} | {o_sps:,.0f} | {t_sps:,.0f} | {o_sps / t_sps:.2f}x | {verdict} "
              f"| {o_acc:.4f} | {t_acc:.4f} |")
    if "gemm" in wanted:
        fr = []
        for _ in range(a.runs):
            peak = gemm_peak(1)
            achieved = ours("mlp", 1, batch=512)[2]
            fr.append((achieved, peak))
        ach = statistics.median(x[0] for x in fr)
        peak = statistics.median(x[1] for x in fr)
        print()
        print("| GEMM-bound step | cores (pinning) | achieved GFLOP/s | OpenBLAS sgemm n=2048 GFLOP/s | fraction "
              "| target |")
        print("|---|---|---|---|---|---|")
        print(f"| MLP batch 512, 1 thread | {pinning_label(1)} | {ach:.1f} | {peak:.1f} | {ach / peak:.2f} | >= 0.6 "
              f"{'met' if ach / peak >= 0.6 else 'MISSED'} |")

    if "seeds" in wanted:
        acc = [(ours("mlp", 1, seed=s)[1], torch(a.anchors, "mlp", 1, seed=s)[1]) for s in range(a.seeds)]
        o = statistics.median(x[0] for x in acc)
        t = statistics.median(x[1] for x in acc)
        print()
        print(f"| MLP test accuracy over seeds 0-{a.seeds - 1} | gradmesh | PyTorch | difference of medians | target |")
        print("|---|---|---|---|---|")
        print(f"| per seed | {', '.join(f'{x[0]:.4f}' for x in acc)} | {', '.join(f'{x[1]:.4f}' for x in acc)} | | |")
        print(f"| median | {o:.4f} | {t:.4f} | {o - t:+.4f} | within 0.02 "
              f"{'met' if abs(o - t) <= 0.02 else 'MISSED'} |")


if __name__ == "__main__":
    main()
