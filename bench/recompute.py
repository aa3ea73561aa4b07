#!/usr/bin/env python3
"""Activation checkpointing (model.recompute): memory saved and time added.

Trains the GPT of examples/gpt.toml made larger in the dimensions that
activations grow with (context 256, batch 16, 8 blocks, 256 wide) for a few
steps on one process, with and without model.recompute, alternating runs.
Reports the peak resident memory of the process (GNU time's maximum RSS) and
the time per step (from metrics.jsonl, first step excluded), medians.

usage: bench/recompute.py [--runs 3] [--steps 6] [--gradmesh PATH]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETS = ["model.n_layer=8", "model.n_embd=256", "model.n_head=8", "model.block_size=256", "train.batch_size=16",
        "train.threads=1", "train.eval_every_epoch=false", "schedule.warmup_steps=1", "output.report=false",
        "output.trace_steps=0", "output.save_weights=false", "train.log_every=1"]


def run(gradmesh, tmp, recompute, steps, tag):
    out_dir = os.path.join(tmp, tag)
    cmd = ["/usr/bin/time", "-f", "maxrss_kb=%M", gradmesh, "train", os.path.join(ROOT, "examples", "gpt.toml"),
           "--set", f"data.tokens={tmp}/tokens", "--set", f"output.dir={out_dir}", "--set", "output.run_id=r",
           "--set", f"train.max_steps={steps}", "--set", f"model.recompute={'true' if recompute else 'false'}"]
    for s in SETS:
        cmd += ["--set", s]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, GRADMESH_PROGRESS="off"))
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-2000:]}")
    rss = int([l for l in out.stderr.splitlines() if l.startswith("maxrss_kb=")][-1].split("=")[1]) * 1024
    with open(os.path.join(out_dir, "r", "metrics.jsonl")) as f:
        walls = [json.loads(l)["wall_time"] for l in f if '"type":"step"' in l]
    per_step = (walls[-1] - walls[0]) / (len(walls) - 1)
    return rss, per_step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--gradmesh", default=os.path.join(ROOT, "build", "gradmesh"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.gradmesh, "data", "prepare-text", "--vocab", "char", "--output", f"{tmp}/tokens"],
                       check=True, stdout=subprocess.DEVNULL)
        res = {False: [], True: []}
        for r in range(args.runs):
            for recompute in (False, True):
                res[recompute].append(run(args.gradmesh, tmp, recompute, args.steps, f"{r}-{recompute}"))
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
    print("GPT 8 blocks, 256 wide, context 256, batch 16, one process, one thread; "
          f"median of {args.runs} alternating runs\n")
    print("| model.recompute | peak RSS (MiB) | s/step |")
    print("|---|---|---|")
    for k in (False, True):
        print(f"| {str(k).lower()} | {med[k][0] / 2**20:.0f} | {med[k][1]:.3f} |")
    saved = med[False][0] - med[True][0]
    print(f"\nmemory saved: {saved / 2**20:.0f} MiB ({saved / med[False][0]:.0%} of the peak); "
          f"time added: {med[True][1] / med[False][1] - 1:.0%} per step")


if __name__ == "__main__":
    sys.exit(main())
