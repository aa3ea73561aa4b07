#!/usr/bin/env python3
"""Model parallelism on this machine: peak resident memory per rank and
training throughput of each layout of the same GPT, beside one process.

The model and run are bench/zero_memory.py's: examples/gpt.toml scaled to
8 blocks, 8 heads, 512 wide (25.3 M parameters, AdamW), batch 8 windows of
128 characters, one thread per rank, shm. Layouts: one process; data
parallelism on 2 ranks; tensor parallelism on 2 ranks (tp = 2); 2 pipeline
stages (pp = 2, 1F1B over 4 micro-batches of 2 windows); ZeRO stage 3
on 2 ranks (for comparison: it shards the same state differently); and
on 4 ranks dp 2 x tp 2, pp 2 x tp 2, and ZeRO on the dp groups of
dp 2 x pp 2 (stage 1) and dp 2 x tp 2 (stage 2); and pp = 2 with 8
micro-batches of one window under 1F1B and GPipe (1F1B holds at most 2 in
flight per stage, GPipe all 8). The estimate is the one each run prints at
start, for its largest rank. Memory: the largest rank's ru_maxrss. Throughput:
tokens/s over the steps after the first (train_seconds of a run of
`--steps` minus one of 1 step, so start-up and the first step's allocations
are left out).

On two cores, more processes than cores time-share them: a layout's
throughput here says what splitting costs in communication and in lost
GEMM efficiency, not what it gains on a machine with a core per rank.

usage: bench/model_parallel.py [--steps 6] [--only REGEX] [--gradmesh build/gradmesh]
"""
import argparse, json, os, re, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zero_memory  # noqa: E402  (the same model, run and metrics reader)

MIB = 1024.0 * 1024.0
LAYOUTS = [  # (name, ranks, extra config)
    ("one process", 1, []),
    ("dp = 2", 2, []),
    ("tp = 2", 2, ["parallel.mesh.tp=2"]),
    ("pp = 2 (1F1B, 4 micro-batches)", 2, ["parallel.mesh.pp=2"]),
    ("dp = 2, ZeRO stage 3", 2, ["parallel.zero=3"]),
    ("dp 2 x tp 2", 4, ["parallel.mesh.tp=2"]),
    ("pp 2 x tp 2", 4, ["parallel.mesh.pp=2", "parallel.mesh.tp=2"]),
    ("dp 2 x pp 2, ZeRO stage 1", 4, ["parallel.mesh.pp=2", "parallel.zero=1"]),
    ("dp 2 x tp 2, ZeRO stage 2", 4, ["parallel.mesh.tp=2", "parallel.zero=2"]),
    ("pp = 2, 1F1B, 8 micro-batches", 2, ["parallel.mesh.pp=2", "parallel.micro_batches=8"]),
    ("pp = 2, GPipe, 8 micro-batches", 2,
     ["parallel.mesh.pp=2", "parallel.micro_batches=8", "parallel.pipeline_schedule=gpipe"]),
]


def run(gradmesh, tmp, tag, ranks, extra, steps):
    sets = [s for s in extra if not s.startswith("parallel.zero")] + [f"train.max_steps={steps}"]
    stage = int(next((s.split("=")[1] for s in extra if s.startswith("parallel.zero")), 0))
    sub = os.path.join(tmp, tag)
    os.makedirs(sub, exist_ok=True)
    os.symlink(os.path.join(tmp, "tokens"), os.path.join(sub, "tokens"))
    return zero_memory.train(gradmesh, sub, ranks, stage, sets)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gradmesh", default=os.path.join(zero_memory.ROOT, "build", "gradmesh"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--only", default="", help="run the layouts whose name matches this regular expression")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.gradmesh, "data", "prepare-text", "--vocab", "char", "--output", f"{tmp}/tokens"],
                       check=True, stdout=subprocess.DEVNULL)
        # The sides differ in cores: one process uses one core, N ranks share this machine's cores.
        cores = os.cpu_count()
        print("| layout | ranks (1 thread each) | cores used | params per rank (MiB) | estimate (MiB) "
              "| peak RSS per rank (MiB) | tokens/s | vs one process (1 core) |")
        print("|---|---|---|---|---|---|---|---|")
        base = None
        for i, (name, ranks, extra) in enumerate(LAYOUTS):
            if i > 0 and args.only and not re.search(args.only, name):
                continue  # one process always runs: it is the anchor
            memory, peaks = run(args.gradmesh, tmp, f"l{i}s", ranks, extra, args.steps)
            run(args.gradmesh, tmp, f"l{i}o", ranks, extra, 1)
            full = zero_memory_summary(tmp, f"l{i}s", ranks, extra)
            first = zero_memory_summary(tmp, f"l{i}o", ranks, extra)
            tokens = (args.steps - 1) * 8 * 128 / (full["train_seconds"] - first["train_seconds"])
            base = base or tokens
            print(f"| {name} | {ranks} | {min(ranks, cores)} of {cores} | {memory['params_bytes'] / MIB:.1f} | {memory['estimate_bytes'] / MIB:.1f} "
                  f"| {max(peaks) / MIB:.1f} | {tokens:.0f} | {tokens / base:.2f}x |", flush=True)


def zero_memory_summary(tmp, tag, ranks, extra):
    stage = int(next((s.split("=")[1] for s in extra if s.startswith("parallel.zero")), 0))
    path = os.path.join(tmp, tag, f"n{ranks}-z{stage}", "r", "metrics.jsonl")
    with open(path) as f:
        return [json.loads(l) for l in f if '"summary"' in l][-1]


if __name__ == "__main__":
    main()
