#!/usr/bin/env python3
"""bf16 products against float32, and against PyTorch's CPU autocast, side by side.

On the same cores, alternating A B C D A B C D (medians of --runs):
  gradmesh, train.precision = "fp32"      (OpenBLAS sgemm)
  gradmesh, train.precision = "bf16"      (oneDNN bf16 matmul, float32 sums)
  PyTorch 1.13 float32                     (bench/torch_autocast_anchor.py ... fp32)
  PyTorch 1.13 torch.autocast("cpu", dtype=torch.bfloat16)
for the reference MLP and CNN (examples/mlp.toml, examples/cnn.toml: the
models, optimizer, batch 128 and data of ../shared/anchors/torch_fmnist.py),
one thread pinned to one core (taskset -c 0) and two threads on two cores,
and for the GPT of examples/gpt.toml against the same model in PyTorch
(bench/gpt_speed.py's training measurement, one pinned core: fortunes'
characters, batch 32 x 128, AdamW), with its validation loss after one
epoch in both precisions (--only gptloss, two threads).
Also the GEMM roofs of both precisions (gradmesh bench gemm, n = 2048) and
each gradmesh run's achieved GEMM GFLOP/s as a fraction of its precision's
roof, and the test accuracy after --epochs epochs in both precisions.

usage: bench/bf16.py [--runs N] [--epochs N] [--only mlp1,mlp2,cnn1,gpt1,accuracy,gptloss]
       ONEDNN_MAX_CPU_ISA=AVX512_CORE bench/bf16.py ...   the table of a CPU without bf16 dot products
Run with Debian's /usr/bin/python3 (the one with torch).
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loader import machine_line  # noqa: E402
import gpt_speed  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
ANCHOR = os.path.join(ROOT, "bench", "torch_autocast_anchor.py")


def pin(threads):
    return ["taskset", "-c", "0"] if threads == 1 else ["taskset", "-c", "0,1"]


def run(cmd, env=None):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        sys.exit(f"benchmark command failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-2000:]}")
    return out.stdout


def ours(kind, threads, precision, epochs=1, max_steps=0):
    with tempfile.TemporaryDirectory() as tmp:
        sets = [f"train.threads={threads}", f"train.precision=\"{precision}\"", f"train.epochs={epochs}",
                f"output.dir={tmp}", "output.save_weights=false", "output.report=false", "output.trace_steps=0",
                f"train.max_steps={max_steps}", f"train.eval_every_epoch={'true' if epochs > 1 else 'false'}"]
        cmd = pin(threads) + [GRADMESH, "train", os.path.join(ROOT, "examples", f"{kind}.toml")]
        for s in sets:
            cmd += ["--set", s]
        run(cmd, env=dict(os.environ, GRADMESH_PROGRESS="off"))
        (run_dir,) = os.listdir(tmp)
        with open(os.path.join(tmp, run_dir, "metrics.jsonl")) as f:
            summary = [json.loads(l) for l in f if '"summary"' in l][-1]
    return summary["samples_per_s"], summary.get("test_accuracy", float("nan")), summary["gemm_gflops_per_s"]


def torch(kind, threads, precision, epochs=1):
    out = run(pin(threads) + ["/usr/bin/python3", ANCHOR, kind, str(epochs), "128", precision],
              env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    m = re.search(r"samples/s=(\d+) test_acc=([0-9.]+)", out)
    if not m:
        sys.exit(f"cannot parse the anchor's output:\n{out}")
    return float(m.group(1)), float(m.group(2))


def roof(dtype, threads):
    out = json.loads(run(pin(threads) + [GRADMESH, "bench", "gemm", "--n", "2048", "--threads", str(threads),
                                         "--dtype", dtype, "--json"]))
    return out["gflops"], out.get("isa", "OpenBLAS")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--cnn-steps", type=int, default=150, help="CNN speed runs stop after this many steps")
    ap.add_argument("--gpt-steps", type=int, default=30, help="timed GPT steps (after gpt_speed's warm-up)")
    ap.add_argument("--only", default="mlp1,mlp2,cnn1,gpt1,accuracy,gptloss")
    a = ap.parse_args()
    wanted = a.only.split(",")
    print(machine_line())
    print(f"OPENBLAS_CORETYPE: {os.environ.get('OPENBLAS_CORETYPE', 'auto')}; medians of {a.runs} alternating runs")
    if os.environ.get("ONEDNN_MAX_CPU_ISA"):
        # Both sides use Debian's oneDNN, so the cap holds for gradmesh and PyTorch alike: with
        # AVX512_CORE, a CPU without bf16 dot products (oneDNN emulates bf16 there).
        print(f"ONEDNN_MAX_CPU_ISA={os.environ['ONEDNN_MAX_CPU_ISA']} (oneDNN capped, for gradmesh and PyTorch alike)")
    roofs = {}
    for threads in (1, 2):
        for dtype in ("f32", "bf16"):
            samples = [roof(dtype, threads) for _ in range(a.runs)]
            roofs[(dtype, threads)] = (statistics.median(s[0] for s in samples), samples[0][1])
    print()
    print("| GEMM roof, n = 2048 | 1 core | 2 cores |")
    print("|---|---|---|")
    for dtype, label in (("f32", "OpenBLAS sgemm"), ("bf16", f"bf16: {roofs[('bf16', 1)][1]}")):
        print(f"| {label} | {roofs[(dtype, 1)][0]:,.0f} GFLOP/s | {roofs[(dtype, 2)][0]:,.0f} GFLOP/s |")
    print()
    print("| workload | gradmesh fp32 | gradmesh bf16 | PyTorch fp32 | PyTorch autocast bf16 | bf16 / own fp32 "
          "(target >= 2) | bf16 / PyTorch bf16 | fraction of roof (fp32, bf16) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, kind, threads, steps in (("mlp1", "mlp", 1, 0), ("mlp2", "mlp", 2, 0), ("cnn1", "cnn", 1, a.cnn_steps)):
        if name not in wanted:
            continue
        rows = {"of": [], "ob": [], "tf": [], "tb": []}
        for _ in range(a.runs):
            rows["of"].append(ours(kind, threads, "fp32", max_steps=steps))
            rows["ob"].append(ours(kind, threads, "bf16", max_steps=steps))
            rows["tf"].append(torch(kind, threads, "fp32"))
            rows["tb"].append(torch(kind, threads, "bf16"))
        med = {k: statistics.median(x[0] for x in v) for k, v in rows.items()}
        gf = {k: statistics.median(x[2] for x in rows[k]) for k in ("of", "ob")}
        target = {"mlp": 1.2, "cnn": 2.0}[kind]
        print(f"| {kind.upper()}, {threads} thread{'s' if threads > 1 else ''} ({' '.join(pin(threads))}) "
              f"| {med['of']:,.0f} | {med['ob']:,.0f} | {med['tf']:,.0f} | {med['tb']:,.0f} "
              f"| {med['ob'] / med['of']:.2f} | {med['ob'] / med['tb']:.2f} (target >= {target}) "
              f"| {gf['of'] / roofs[('f32', threads)][0]:.2f}, {gf['ob'] / roofs[('bf16', threads)][0]:.2f} |")
    if "gpt1" in wanted:
        gpt_rows(a)
    if "accuracy" in wanted:
        print()
        print(f"| test accuracy after {a.epochs} epochs, 1 thread | fp32 | bf16 | difference (target <= 0.005) |")
        print("|---|---|---|---|")
        for kind in ("mlp", "cnn"):
            f32 = ours(kind, 1, "fp32", epochs=a.epochs)[1]
            b16 = ours(kind, 1, "bf16", epochs=a.epochs)[1]
            print(f"| {kind.upper()} | {f32:.4f} | {b16:.4f} | {abs(f32 - b16):.4f} |")
    if "gptloss" in wanted:
        gpt_loss()


def gpt_rows(a):
    """GPT training tokens/s, one pinned core: gradmesh and PyTorch, float32 and bf16."""
    rates = {k: [] for k in ("of", "ob", "tf", "tb")}
    with tempfile.TemporaryDirectory() as tmp:
        run([GRADMESH, "data", "prepare-text", "--vocab", "char", "--output", os.path.join(tmp, "tokens")])
        for r in range(a.runs):
            rates["of"].append(gpt_speed.gradmesh_train(tmp, a.gpt_steps, f"f{r}", "fp32"))
            rates["ob"].append(gpt_speed.gradmesh_train(tmp, a.gpt_steps, f"b{r}", "bf16"))
            rates["tf"].append(gpt_speed.torch_rate("train", tmp, a.gpt_steps, 0, "fp32"))
            rates["tb"].append(gpt_speed.torch_rate("train", tmp, a.gpt_steps, 0, "bf16"))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"| GPT tokens/s, 1 thread (taskset -c 0) | {med['of']:,.0f} | {med['ob']:,.0f} | {med['tf']:,.0f} "
          f"| {med['tb']:,.0f} | {med['ob'] / med['of']:.2f} | {med['ob'] / med['tb']:.2f} (target >= 1.5; "
          f"fp32 / PyTorch fp32 {med['of'] / med['tf']:.2f}, target >= 1.5) | - |")


def gpt_loss():
    """Validation loss of examples/gpt.toml after one whole epoch, float32 and bf16, two threads."""
    with tempfile.TemporaryDirectory() as tmp:
        tokens = os.path.join(tmp, "tokens")
        run([GRADMESH, "data", "prepare-text", "--vocab", "char", "--output", tokens])
        losses = {}
        for precision in ("fp32", "bf16"):
            out = os.path.join(tmp, precision)
            run(pin(2) + [GRADMESH, "train", os.path.join(ROOT, "examples", "gpt.toml"), "--set", "train.threads=2",
                          "--set", "train.max_steps=0", "--set", f'train.precision="{precision}"',
                          "--set", f"data.tokens={tokens}", "--set", f"output.dir={out}", "--set", "output.run_id=r",
                          "--set", "output.report=false", "--set", "data.limit_test=0"],
                env=dict(os.environ, GRADMESH_PROGRESS="off"))
            with open(os.path.join(out, "r", "metrics.jsonl")) as f:
                summary = [json.loads(l) for l in f if '"summary"' in l][-1]
            losses[precision] = (summary["test_loss"], summary.get("steps", 0))
    f32, b16 = losses["fp32"][0], losses["bf16"][0]
    print()
    print(f"| GPT validation loss after one epoch ({losses['fp32'][1]} steps), 2 threads | fp32 | bf16 "
          f"| relative difference (target <= 0.02) |")
    print("|---|---|---|---|")
    print(f"| examples/gpt.toml, fortunes characters | {f32:.4f} | {b16:.4f} | {abs(b16 - f32) / f32:.4f} |")


if __name__ == "__main__":
    main()
