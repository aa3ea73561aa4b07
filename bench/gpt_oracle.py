#!/usr/bin/env python3
"""The gradmesh GPT against the same model in PyTorch (bench/gpt_torch.py).

Both start from one set of initial weights (drawn by PyTorch, loaded by
gradmesh with train.init_from). Checks, on a character-level token set of one
fortunes file:
  * logits of 4 validation windows and the validation loss agree to 1e-5 relative;
  * after 20 AdamW steps on the same batches (gradmesh draws the training
    windows from its counter-based RNG; this script replays the draw), every
    weight agrees to 1e-4 relative (max |a - b| / max |b| per tensor).

usage: bench/gpt_oracle.py [--steps 20] [--corpus FILE]   (run with /usr/bin/python3)
"""
import argparse, json, os, subprocess, sys, tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch as gt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
SHAPE = dict(block_size=32, n_layer=2, n_head=4, n_embd=64, tie_weights=True)
BATCH, LR, WD, BETAS, EPS, SEED, EVAL = 8, 1e-3, 0.1, (0.9, 0.95), 1e-8, 3, 4


def gradmesh(*args):
    out = subprocess.run([GRADMESH, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, GRADMESH_PROGRESS="off"))
    if out.returncode != 0:
        sys.exit(f"gradmesh {' '.join(args)} failed ({out.returncode}):\n{out.stdout[-3000:]}")
    return out.stdout


def sets(tokens, steps):
    keys = {"model.kind": "gpt", "data.format": "tokens", "data.tokens": tokens, "data.shuffle": "false",
            "data.limit_test": EVAL, "train.batch_size": BATCH, "train.max_steps": steps, "train.seed": SEED,
            "train.threads": 1, "train.eval_every_epoch": "false", "optim.name": "adamw", "optim.lr": LR,
            "optim.weight_decay": WD, "optim.beta1": BETAS[0], "optim.beta2": BETAS[1], "optim.eps": EPS,
            "optim.clip_grad_norm": 0, "schedule.kind": "constant", "schedule.warmup_steps": 0, "output.report": "false",
            "output.trace_steps": 0, **{f"model.{k}": str(v).lower() for k, v in SHAPE.items()}}
    out = []
    for k, v in keys.items():
        out += ["--set", f"{k}={v}"]
    return out


def relative(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--corpus", default="/usr/share/games/fortunes/science")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tokens = os.path.join(tmp, "tokens")
        gradmesh("data", "prepare-text", "--vocab", "char", "--input", args.corpus, "--output", tokens)
        with open(os.path.join(tokens, "vocab.json")) as f:
            vocab = json.load(f)["vocab_size"]
        config = dict(SHAPE, vocab_size=vocab)
        torch.manual_seed(0)
        model = gt.GPT(config)
        init = os.path.join(tmp, "init.safetensors")
        gt.save_safetensors(init, gt.gradmesh_state(model))
        base = os.path.join(ROOT, "examples", "gpt.toml")
        T = SHAPE["block_size"]

        # 1. Logits and validation loss at the initial weights.
        logits_file = os.path.join(tmp, "logits.safetensors")
        line = gradmesh("eval", base, "--weights", init, "--logits", logits_file, *sets(tokens, 1)).strip().splitlines()[-1]
        ours_loss = json.loads(line)["test_loss"]
        dumped = gt.load_safetensors(logits_file)
        val = gt.read_tokens(tokens, "val")
        windows = torch.stack([val[i * T:i * T + T + 1] for i in range(EVAL)])
        with torch.no_grad():
            theirs = model(windows[:, :-1])
            torch_loss = F.cross_entropy(theirs.reshape(-1, vocab), windows[:, 1:].reshape(-1)).item()
        assert torch.equal(dumped["inputs"].to(torch.int64), windows[:, :-1]), "the evaluation windows differ"
        logits_rel = relative(dumped["logits"], theirs.reshape(-1, vocab))
        loss_rel = abs(ours_loss - torch_loss) / abs(torch_loss)

        # 2. Weights after `steps` AdamW steps on the same windows.
        gradmesh("train", base, "--set", f"train.init_from={init}", "--set", f"output.dir={tmp}/runs",
                 "--set", "output.run_id=oracle", *sets(tokens, args.steps))
        trained = gt.load_safetensors(os.path.join(tmp, "runs", "oracle", "model.safetensors"))
        train = gt.read_tokens(tokens, "train")
        opt = model.optimizer(LR, WD, BETAS, EPS)
        for step in range(args.steps):
            starts = gt.window_starts(SEED, 0, step * BATCH, BATCH, len(train), T)
            batch = torch.stack([train[s:s + T + 1] for s in starts])
            loss = F.cross_entropy(model(batch[:, :-1]).reshape(-1, vocab), batch[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
        reference = gt.gradmesh_state(model)
        # The key bias of each head has a gradient of exactly zero (adding a
        # constant to every key shifts all of a query's scores equally, and
        # softmax ignores that), so both sides compute rounding noise there,
        # which AdamW's normalisation turns into steps of full size in random
        # directions. It is compared apart, in absolute terms.
        C = SHAPE["n_embd"]
        diffs, key_bias = {}, 0.0
        for name, t in reference.items():
            if name.endswith("attn.c_attn.bias"):
                key_bias = max(key_bias, (trained[name][C:2 * C] - t[C:2 * C]).abs().max().item())
                diffs[name + " (query, value)"] = relative(torch.cat([trained[name][:C], trained[name][2 * C:]]),
                                                           torch.cat([t[:C], t[2 * C:]]))
            else:
                diffs[name] = relative(trained[name], t)
        if os.environ.get("ORACLE_VERBOSE"):
            for name, d in diffs.items():
                print(f"{name}: {d:.2e}", file=sys.stderr)
        worst = max((d, name) for name, d in diffs.items())
        assert set(trained) == set(reference), sorted(set(trained) ^ set(reference))

    print(f"GPT oracle: {SHAPE['n_layer']} layers, {SHAPE['n_head']} heads, {SHAPE['n_embd']} wide, context {T}, "
          f"vocabulary {vocab}; PyTorch {torch.__version__}, both float32 on one thread\n")
    print("| check | relative difference | target | met |")
    print("|---|---|---|---|")
    rows = [(f"logits of {EVAL} validation windows", logits_rel, 1e-5),
            (f"validation loss ({ours_loss:.6f} vs {torch_loss:.6f})", loss_rel, 1e-5),
            (f"weights after {args.steps} AdamW steps (worst: {worst[1]})", worst[0], 1e-4)]
    for what, value, target in rows:
        print(f"| {what} | {value:.2e} | {target:.0e} | {'yes' if value <= target else 'NO'} |")
    print(f"\nKey biases (their true gradient is 0: both sides step on rounding noise) are compared apart: "
          f"largest absolute difference {key_bias:.1e} after {args.steps} steps at lr {LR}.")
    return 0 if all(v <= t for _, v, t in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
