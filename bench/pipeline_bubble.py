#!/usr/bin/env python3
"""Pipeline bubble: the idle fraction of each stage, measured from the
Chrome traces of real 1F1B runs, beside (p - 1) / (m + p - 1) and beside the
schedule simulated with the stages' measured forward and backward times.

A GPT of 4 blocks, 128 wide, context 64, batch 32 windows, one thread per
rank, shm, for p = 2 and 4 stages and m = 1, 4, 8, 16 micro-batches. Each
rank traces steps 1-4; the bubble is taken over steps 2-4 (the first step
allocates). For one step on one stage:

  window = from the step's start to the end of the last pass of any stage
           (stage 0's last backward: the pipeline's flush; the optimizer,
           the loss all-reduce and the data-parallel reduction after it are
           not pipeline time); ranks start a step together, since the one
           before ended in collectives
  busy   = the sum of its forward and backward spans
  idle   = 1 - busy / window

Communication is not subtracted from the measured idle: a stage waiting
for a transfer is idle. The simulated column runs the same schedule with
the measured mean forward and backward time of every stage and instant
transfers (parallel::simulated_bubble's model, here in Python), so the
difference between it and the measured idle is what transfers and time
sharing cost. With p = 4, four processes share this machine's two cores.

usage: bench/pipeline_bubble.py [--gradmesh build/gradmesh]
"""
import argparse, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ["model.kind=gpt", "data.format=tokens", "model.n_layer=4", "model.n_embd=128", "model.n_head=4",
         "model.block_size=64", "train.batch_size=32", "train.max_steps=4", "train.threads=1",
         "train.eval_every_epoch=false", "output.trace_steps=4", "output.report=false", "output.save_weights=false",
         "parallel.pipeline_schedule=1f1b"]


def schedule(stage, stages, m):
    """1F1B as parallel::stage_schedule: (forward?, micro-batch) in order."""
    warm = min(stages - stage, m)
    steps, f, b = [(True, i) for i in range(warm)], warm, 0
    while f < m:
        steps += [(False, b), (True, f)]
        f, b = f + 1, b + 1
    return steps + [(False, i) for i in range(b, m)]


def simulate(m, fwd, bwd):
    p = len(fwd)
    plans = [schedule(s, p, m) for s in range(p)]
    done_f = [[None] * m for _ in range(p)]
    done_b = [[None] * m for _ in range(p)]
    nxt, free, busy = [0] * p, [0.0] * p, [0.0] * p
    progressed = True
    while progressed:
        progressed = False
        for s in range(p):
            while nxt[s] < len(plans[s]):
                fw, i = plans[s][nxt[s]]
                ready = (0.0 if s == 0 else done_f[s - 1][i]) if fw else (done_f[s][i] if s == p - 1 else done_b[s + 1][i])
                if ready is None:
                    break
                cost = fwd[s] if fw else bwd[s]
                free[s] = max(ready, free[s]) + cost
                busy[s] += cost
                (done_f if fw else done_b)[s][i] = free[s]
                nxt[s] += 1
                progressed = True
    total = max(free)
    return [1 - b / total for b in busy]


def measure(gradmesh, tmp, p, m):
    out = os.path.join(tmp, f"p{p}m{m}")
    sets = MODEL + [f"data.tokens={tmp}/tokens", f"parallel.mesh.pp={p}", f"parallel.micro_batches={m}",
                    f"output.dir={out}", "output.run_id=r"]
    cmd = [gradmesh, "train", os.path.join(ROOT, "examples", "mlp.toml"), "--nproc-per-node", str(p)]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, GRADMESH_PROGRESS="off"))
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}")
    # Per stage and step: (busy, end of its last pass), both from the step's start.
    per_stage, fwd, bwd = [], [], []
    for stage in range(p):
        with open(os.path.join(out, "r", f"trace.rank{stage}.json")) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
        steps = sorted((e for e in events if e["name"].startswith("step ")), key=lambda e: e["ts"])[1:]
        passes = [e for e in events if e["name"].startswith(("forward mb", "backward mb"))]
        rows = []
        for st in steps:
            inside = [e for e in passes if st["ts"] <= e["ts"] <= st["ts"] + st["dur"]]
            rows.append((sum(e["dur"] for e in inside), max(e["ts"] + e["dur"] for e in inside) - st["ts"]))
            fwd += [(stage, e["dur"]) for e in inside if e["name"].startswith("forward")]
            bwd += [(stage, e["dur"]) for e in inside if e["name"].startswith("backward")]
        per_stage.append(rows)
    # The pipeline's window is the same for every stage: until the last pass of any stage ends (stage 0's
    # last backward). Ranks start each step together: the previous step ended in collectives.
    idle = [0.0] * p
    for k in range(len(per_stage[0])):
        window = max(per_stage[s][k][1] for s in range(p))
        for s in range(p):
            idle[s] += (1 - per_stage[s][k][0] / window) / len(per_stage[0])
    mean = lambda pairs, s: sum(d for st, d in pairs if st == s) / max(1, sum(1 for st, _ in pairs if st == s))
    simulated = simulate(m, [mean(fwd, s) for s in range(p)], [mean(bwd, s) for s in range(p)])
    return idle, simulated


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gradmesh", default=os.path.join(ROOT, "build", "gradmesh"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.gradmesh, "data", "prepare-text", "--vocab", "char", "--output", f"{tmp}/tokens"],
                       check=True, stdout=subprocess.DEVNULL)
        print("| p | m | (p-1)/(m+p-1) | simulated, measured stage times | measured idle, mean of stages | per stage |")
        print("|---|---|---|---|---|---|")
        for p in (2, 4):
            for m in (1, 4, 8, 16):
                idle, simulated = measure(args.gradmesh, tmp, p, m)
                textbook = (p - 1) / (m + p - 1)
                print(f"| {p} | {m} | {textbook:.3f} | {sum(simulated) / p:.3f} | {sum(idle) / p:.3f} | "
                      + " ".join(f"{x:.2f}" for x in idle) + " |", flush=True)


if __name__ == "__main__":
    main()
