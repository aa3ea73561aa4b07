#!/usr/bin/env python3
"""Training from shards: is the loader ever the bottleneck?

1. CNN (examples/cnn.toml, 2 threads) for a fixed number of steps, A B A B:
   A  today's in-memory IDX path (Fashion-MNIST loaded whole, as floats);
   B  the same training images as JPEG files (PIL quality 90) in an image
      folder, prepared into an MDS set, decoded by the loader (data.workers=1)
      with random crop (padding 4) and flip, read sample by sample from shards.
   Target: B >= 0.9 x A in samples/s.
2. GPT (examples/gpt.toml's model) on SentencePiece subwords of a corpus
   larger than fortunes: Python 3.11's documentation sources (Debian's
   python3.11-doc, 12 MB of reStructuredText), 8000 BPE pieces; the tokenizer's
   training and encoding time, then training tokens/s and validation loss,
   beside the same model on fortunes' characters (the setup of docs/gpt.md).

usage: bench/data_training.py [--runs N] [--steps N] [--work DIR]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loader import machine_line, write_folder  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
PYDOC = "/usr/share/doc/python3.11/html/_sources"


def run(cmd, **kw):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if out.returncode != 0:
        sys.exit(f"benchmark command failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return out.stdout


def train(example, sets, work):
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        cmd = [GRADMESH, "train", os.path.join(ROOT, "examples", example), "--set", f"output.dir={tmp}",
               "--set", "output.report=false", "--set", "output.trace_steps=0", "--set", "output.save_weights=false"]
        for s in sets:
            cmd += ["--set", s]
        run(cmd, env=dict(os.environ, GRADMESH_PROGRESS="off"))
        (run_dir,) = os.listdir(tmp)
        with open(os.path.join(tmp, run_dir, "metrics.jsonl")) as f:
            return [json.loads(l) for l in f if '"summary"' in l][-1]


def cnn(args, work):
    folder, set_dir = os.path.join(work, "fmnist-jpeg"), os.path.join(work, "fmnist-set")
    if not os.path.isdir(folder):
        write_folder(folder)
    if not os.path.exists(os.path.join(set_dir, "index.json")):
        run([GRADMESH, "data", "prepare", "--image-folder", folder, "--output", set_dir])
    common = ["train.threads=2", f"train.max_steps={args.steps}", "train.eval_every_epoch=false"]
    sharded = common + ["data.format=\"mds\"", f"data.train_set={set_dir}", "data.crop_padding=4", "data.flip=true",
                        "data.workers=1"]
    a, b = [], []
    for _ in range(args.runs):
        a.append(train("cnn.toml", common, work)["samples_per_s"])
        b.append(train("cnn.toml", sharded, work)["samples_per_s"])
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"| setup (CNN, 2 threads, {args.steps} steps of 128) | samples/s |")
    print("|---|---|")
    print(f"| A: IDX files loaded whole (floats in memory) | {ma:,.0f} |")
    print(f"| B: JPEG MDS shards, decoded + crop pad 4 + flip by the loader (data.workers=1) | {mb:,.0f} |")
    print(f"| B / A (target >= 0.9) | {mb / ma:.2f} |")
    print()


def gpt(args, work):
    pieces = os.path.join(work, "pydoc-pieces")
    chars = os.path.join(work, "fortunes-chars")
    if not os.path.isdir(PYDOC):
        print(f"(GPT part skipped: {PYDOC} missing; apt-get install python3.11-doc)")
        return
    corpus_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(PYDOC) for f in fs) / 1e6
    if not os.path.exists(os.path.join(pieces, "vocab.json")):
        start = time.perf_counter()
        out = run([GRADMESH, "data", "prepare-text", "--vocab", "sentencepiece", "--vocab-size", "8000",
                   "--input", PYDOC, "--output", pieces])
        print(f"prepare-text --vocab sentencepiece (8000 pieces, {corpus_mb:.1f} MB): {time.perf_counter() - start:.1f} s")
        print(f"  {out.strip()}")
    if not os.path.exists(os.path.join(chars, "vocab.json")):
        run([GRADMESH, "data", "prepare-text", "--vocab", "char", "--output", chars])
    steps = max(args.steps, 200)
    common = ["train.threads=2", f"train.max_steps={steps}", "schedule.warmup_steps=20"]
    rows = []
    for name, tokens in (("SentencePiece 8000, Python docs", pieces), ("characters, fortunes", chars)):
        s = train("gpt.toml", common + [f"data.tokens={tokens}"], work)
        rows.append((name, s["tokens_per_s"], s.get("test_loss", float("nan"))))
    print(f"| GPT (examples/gpt.toml model, 2 threads, {steps} steps of 32 x 128 tokens) | tokens/s | validation loss |")
    print("|---|---|---|")
    for name, rate, loss in rows:
        print(f"| {name} | {rate:,.0f} | {loss:.3f} |")
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--work", default=None)
    ap.add_argument("--only", default="cnn,gpt")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="gradmesh-data-bench-")
    print(machine_line())
    print(f"OPENBLAS_CORETYPE: {os.environ.get('OPENBLAS_CORETYPE', 'auto')}; medians of {args.runs} runs, A B A B")
    print()
    if "cnn" in args.only:
        cnn(args, work)
    if "gpt" in args.only:
        gpt(args, work)


if __name__ == "__main__":
    main()
