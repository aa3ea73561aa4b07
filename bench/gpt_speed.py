#!/usr/bin/env python3
"""GPT speed: gradmesh against the same model in PyTorch (bench/gpt_torch.py),
one core each (taskset -c 0, one thread), alternating runs, medians.

Training: the config of examples/gpt.toml (4 blocks, 4 heads, 128 wide,
context 128, batch 32, AdamW), tokens/s over timed steps after warm-up steps;
gradmesh reads its training windows from the token set through its loader
thread, PyTorch indexes windows from a tensor already in memory.
Generation: tokens/s of gradmesh generate (key/value cache) against PyTorch
without a cache (each token runs the whole context again, as nanoGPT's
generate does) and PyTorch with a hand-written cache. Same prompt, same
number of tokens, sampling at temperature 1.

usage: bench/gpt_speed.py [--runs 3] [--steps 30] [--tokens 256]   (run with /usr/bin/python3)
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
CONFIG = dict(n_layer=4, n_head=4, n_embd=128, block_size=128, tie_weights=True)
BATCH, WARMUP = 32, 3
TARGETS = {"train": 1.5, "generate": 2.0}
PIN = ["taskset", "-c", "0"]


def run(cmd, env=None):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.exit(f"command failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out


def gradmesh_train(tmp, steps, run_id, precision="fp32"):
    """Tokens/s over the steps after the first WARMUP (from two runs' train_seconds)."""
    times = {}
    for n in (WARMUP, WARMUP + steps):
        out_dir = os.path.join(tmp, f"{run_id}-{n}")
        run(PIN + [GRADMESH, "train", os.path.join(ROOT, "examples", "gpt.toml"), "--set", "train.threads=1",
                   "--set", f'train.precision="{precision}"',
                   "--set", f"train.max_steps={n}", "--set", "schedule.warmup_steps=1", "--set",
                   "train.eval_every_epoch=false", "--set", f"output.dir={out_dir}", "--set", "output.run_id=r",
                   "--set", "output.report=false", "--set", "output.trace_steps=0", "--set", "output.save_weights=false",
                   "--set", f"data.tokens={tmp}/tokens"], env=dict(os.environ, GRADMESH_PROGRESS="off"))
        with open(os.path.join(out_dir, "r", "metrics.jsonl")) as f:
            summary = [json.loads(l) for l in f if '"summary"' in l][-1]
        times[n] = summary["train_seconds"]
    return steps * BATCH * CONFIG["block_size"] / (times[WARMUP + steps] - times[WARMUP])


def torch_worker(mode, tmp, steps, tokens, precision="fp32"):
    """Runs inside `taskset -c 0 python3 this --worker MODE`: prints tokens/s.
    precision bf16: the forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)."""
    import contextlib
    import torch
    import torch.nn.functional as F
    import gpt_torch as gt
    torch.set_num_threads(1)
    with open(os.path.join(tmp, "tokens", "vocab.json")) as f:
        vocab = json.load(f)["vocab_size"]
    torch.manual_seed(0)
    model = gt.GPT(dict(CONFIG, vocab_size=vocab))
    T = CONFIG["block_size"]
    if mode == "train":
        data = gt.read_tokens(os.path.join(tmp, "tokens"), "train")
        opt = model.optimizer(2e-3, 0.1, (0.9, 0.99), 1e-8)
        gen = torch.Generator().manual_seed(0)

        def step():
            starts = torch.randint(0, len(data) - T, (BATCH,), generator=gen)
            batch = torch.stack([data[s:s + T + 1] for s in starts.tolist()])
            cast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
                    else contextlib.nullcontext())
            with cast:
                loss = F.cross_entropy(model(batch[:, :-1]).reshape(-1, vocab), batch[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        for _ in range(WARMUP):
            step()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return steps * BATCH * T / (time.perf_counter() - t0)
    model.eval()
    idx = torch.tensor([[1, 2, 3, 4]])
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    with torch.no_grad():
        if mode == "generate-nocache":
            for _ in range(tokens):
                logits = model(idx[:, -T:])[:, -1, :]
                nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)
                idx = torch.cat([idx, nxt], dim=1)
        else:  # a cache per block; restart from the last half when the context is full, as gradmesh does
            caches, pos = [[] for _ in range(CONFIG["n_layer"])], 0
            for t in idx[0].tolist():
                logits = model(torch.tensor([[t]]), pos, caches)[:, -1, :]
                pos += 1
            for _ in range(tokens):
                nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)
                idx = torch.cat([idx, nxt], dim=1)
                if pos == T:
                    caches, pos = [[] for _ in range(CONFIG["n_layer"])], 0
                    for t in idx[0, -T // 2:].tolist():
                        logits = model(torch.tensor([[t]]), pos, caches)[:, -1, :]
                        pos += 1
                else:
                    logits = model(nxt, pos, caches)[:, -1, :]
                    pos += 1
    return tokens / (time.perf_counter() - t0)


def torch_rate(mode, tmp, steps, tokens, precision="fp32"):
    out = run(PIN + [sys.executable, os.path.abspath(__file__), "--worker", mode, "--tmp", tmp, "--steps", str(steps),
                     "--tokens", str(tokens), "--precision", precision])
    return float(out.stdout.strip().splitlines()[-1])


def gradmesh_generate(tmp, tokens):
    out = run(PIN + [GRADMESH, "generate", os.path.join(tmp, "gen", "r"), "--prompt", "The ",
                     "--max-tokens", str(tokens), "--temperature", "1", "--threads", "1"])
    line = [l for l in out.stderr.splitlines() if l.startswith("generated ")][-1]
    return float(line.split(": ")[-1].split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--worker")
    ap.add_argument("--tmp")
    ap.add_argument("--precision", default="fp32")
    args = ap.parse_args()
    if args.worker:
        print(torch_worker(args.worker, args.tmp, args.steps, args.tokens, args.precision))
        return 0
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        run([GRADMESH, "data", "prepare-text", "--vocab", "char", "--output", os.path.join(tmp, "tokens")])
        # A trained model to generate from (its weights do not change the speed).
        run([GRADMESH, "train", os.path.join(ROOT, "examples", "gpt.toml"), "--set", "train.max_steps=2",
             "--set", "schedule.warmup_steps=1", "--set", "train.eval_every_epoch=false", "--set",
             f"output.dir={tmp}/gen", "--set", "output.run_id=r", "--set", f"data.tokens={tmp}/tokens"],
            env=dict(os.environ, GRADMESH_PROGRESS="off"))
        rates = {k: [] for k in ("ours-train", "torch-train", "ours-gen", "torch-nocache", "torch-cache")}
        for r in range(args.runs):
            rates["ours-train"].append(gradmesh_train(tmp, args.steps, f"run{r}"))
            rates["torch-train"].append(torch_rate("train", tmp, args.steps, args.tokens))
            rates["ours-gen"].append(gradmesh_generate(tmp, args.tokens))
            rates["torch-nocache"].append(torch_rate("generate-nocache", tmp, args.steps, args.tokens))
            rates["torch-cache"].append(torch_rate("generate-cache", tmp, args.steps, args.tokens))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"GPT speed, one core each (taskset -c 0, 1 thread), median of {args.runs} alternating runs; "
          f"PyTorch {torch.__version__} (explicit attention: no fused kernel in this version)\n")
    print("| measurement | gradmesh | PyTorch | ratio | target | met |")
    print("|---|---|---|---|---|---|")
    train_ratio = med["ours-train"] / med["torch-train"]
    print(f"| training tokens/s ({args.steps} steps after {WARMUP}, batch {BATCH} x {CONFIG['block_size']}, AdamW) | "
          f"{med['ours-train']:.0f} | {med['torch-train']:.0f} | {train_ratio:.2f}x | {TARGETS['train']}x | "
          f"{'yes' if train_ratio >= TARGETS['train'] else 'NO'} |")
    gen_ratio = med["ours-gen"] / med["torch-nocache"]
    print(f"| generation tokens/s ({args.tokens} tokens; gradmesh with its cache, PyTorch without) | "
          f"{med['ours-gen']:.0f} | {med['torch-nocache']:.0f} | {gen_ratio:.2f}x | {TARGETS['generate']}x | "
          f"{'yes' if gen_ratio >= TARGETS['generate'] else 'NO'} |")
    print(f"| generation tokens/s, PyTorch with a hand-written cache | {med['ours-gen']:.0f} | "
          f"{med['torch-cache']:.0f} | {med['ours-gen'] / med['torch-cache']:.2f}x | - | - |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
