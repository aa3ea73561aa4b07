#!/usr/bin/env python3
"""ZeRO memory: peak resident memory per rank beside the start-up estimate,
for stages 0-3 at N = 1, 2, 4 ranks (processes over shm, one thread each).

The model is examples/gpt.toml scaled to 8 blocks, 8 heads, 512 wide
(25.3 M parameters, AdamW: 16 bytes of state per parameter unsharded),
batch 8 windows of 128 characters, 3 steps. The estimate is the one the
trainer prints and writes to metrics.jsonl ("type": "memory"); the peak is
each rank's ru_maxrss, gathered into the summary line (the largest rank's
is shown, with the spread across ranks).

usage: bench/zero_memory.py [--gradmesh build/gradmesh] [--runs "1:0 2:0 2:1 ..."] [--set KEY=VALUE ...]
"""
import argparse, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1024.0 * 1024.0
MODEL = ["model.n_embd=512", "model.n_layer=8", "model.n_head=8", "train.batch_size=8", "train.max_steps=3",
         "schedule.kind=constant", "schedule.warmup_steps=0", "train.threads=1", "train.eval_every_epoch=false",
         "output.save_weights=false", "output.report=false", "output.trace_steps=0"]
RUNS = "1:0 2:0 2:1 2:2 2:3 4:0 4:1 4:2 4:3"


def train(gradmesh, tmp, ranks, stage, extra):
    out_dir = os.path.join(tmp, f"n{ranks}-z{stage}")
    sets = MODEL + [f"data.tokens={tmp}/tokens", f"parallel.zero={stage}", f"output.dir={out_dir}",
                    "output.run_id=r"] + extra
    cmd = [gradmesh, "train", os.path.join(ROOT, "examples", "gpt.toml")]
    for s in sets:
        cmd += ["--set", s]
    if ranks > 1:
        cmd += ["--nproc-per-node", str(ranks)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, GRADMESH_PROGRESS="off"))
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}")
    with open(os.path.join(out_dir, "r", "metrics.jsonl")) as f:
        lines = [json.loads(l) for l in f]
    memory = [l for l in lines if l.get("type") == "memory"][-1]
    summary = [l for l in lines if l.get("type") == "summary"][-1]
    return memory, summary["peak_rss_bytes_per_rank"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gradmesh", default=os.path.join(ROOT, "build", "gradmesh"))
    ap.add_argument("--runs", default=RUNS, help="space-separated RANKS:STAGE pairs")
    ap.add_argument("--set", action="append", default=[], help="extra config overrides")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.gradmesh, "data", "prepare-text", "--vocab", "char", "--output", f"{tmp}/tokens"],
                       check=True, stdout=subprocess.DEVNULL)
        print("| ranks | zero | params | grads | optimizer | activations | estimate | peak RSS per rank (largest) "
              "| spread across ranks |")
        print("|---|---|---|---|---|---|---|---|---|")
        for pair in args.runs.split():
            ranks, stage = (int(x) for x in pair.split(":"))
            m, peaks = train(args.gradmesh, tmp, ranks, stage, args.set)
            print(f"| {ranks} | {stage} | {m['params_bytes'] / MIB:.1f} | {m['grads_bytes'] / MIB:.1f} "
                  f"| {m['optimizer_bytes'] / MIB:.1f} | {m['activation_bytes'] / MIB:.1f} "
                  f"| {m['estimate_bytes'] / MIB:.1f} | {max(peaks) / MIB:.1f} "
                  f"| {(max(peaks) - min(peaks)) / MIB:.1f} |", flush=True)
    print("\n(MiB)")


if __name__ == "__main__":
    main()
