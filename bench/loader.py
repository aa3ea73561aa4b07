#!/usr/bin/env python3
"""Loader benchmark: decoding JPEG samples with augmentation, gradmesh against PyTorch, side by side.

The Fashion-MNIST training set (60,000 28x28 grey images) is written as JPEG
files (quality 90, PIL) in torchvision's ImageFolder layout. Then, pinned to the
same two cores (taskset -c 0,1), alternating A B A B:

  A  gradmesh data bench: the MDS set `gradmesh data prepare --image-folder`
     wrote from that folder, through the training loader with data.workers = 2,
     batches of 256, random crop (padding 4), random flip, normalisation;
  B  PyTorch's DataLoader over torchvision.datasets.ImageFolder, num_workers=2,
     batch_size=256, shuffle=True, transforms RandomCrop(28, padding=4),
     RandomHorizontalFlip(), ToTensor(), Normalize((0.5,), (0.5,)); the
     images are opened as grey ("L"), which is what the gradmesh side decodes
     (ImageFolder's default loader would convert them to RGB: 3x the pixels).

Each side reads one whole epoch; samples/s is samples / wall time from the
first batch requested to the last delivered. The decode limit is gradmesh
data bench --decode-only: libjpeg-turbo decoding the same JPEG bytes from
memory on one core (taskset -c 0), nothing else. A also runs 5 epochs in one
process, for the loader's rate once its start-up (opening the set, the first
batches) is spread over more samples.

usage: bench/loader.py [--runs N] [--work DIR]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
DATA = os.environ.get("GRADMESH_DATA_DIR", "/usr/share/datasets/fashion-mnist")
TWO_CORES = ["taskset", "-c", "0,1"]
ONE_CORE = ["taskset", "-c", "0"]

TORCH_LOADER = r'''
import sys, time, torch
from PIL import Image
from torchvision import datasets, transforms
torch.set_num_threads(1)
t = transforms.Compose([transforms.RandomCrop(28, padding=4), transforms.RandomHorizontalFlip(),
                        transforms.ToTensor(), transforms.Normalize((0.5,), (0.5,))])
grey = lambda path: Image.open(path).convert("L")
data = datasets.ImageFolder(sys.argv[1], transform=t, loader=grey)
loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=True, num_workers=2)
start = time.perf_counter()
n = 0
for x, y in loader:
    n += x.shape[0]
print(n, time.perf_counter() - start)
'''


def run(cmd, **kw):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if out.returncode != 0:
        sys.exit(f"benchmark command failed ({out.returncode}): {' '.join(cmd)}\n{out.stderr[-2000:]}")
    return out.stdout


def machine_line():
    lscpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
    field = lambda name: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith(name)), "?")
    flags = field("Flags:").split()
    wanted = [f for f in flags if f in ("avx2", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16")]
    return f"CPU: {field('Model name:')}, {os.cpu_count()} cores ({' '.join(wanted) or 'no avx2'})"


def write_folder(root):
    """Fashion-MNIST's training set as root/<class>/<index>.jpg, PIL quality 90."""
    import gzip
    import numpy as np
    from PIL import Image
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    for c in range(10):
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
    for i, (image, label) in enumerate(zip(images, labels)):
        Image.fromarray(image, "L").save(os.path.join(root, f"class{label}", f"{i:05d}.jpg"), quality=90)
    return len(images)


def ours(set_dir, epochs=1):
    out = json.loads(run(TWO_CORES + [GRADMESH, "data", "bench", set_dir, "--workers", "2", "--batch", "256",
                                      "--crop-padding", "4", "--flip", "--epochs", str(epochs), "--json"]))
    return out["samples_per_s"], out["samples"]


def torch_side(folder, script):
    n, seconds = run(TWO_CORES + ["/usr/bin/python3", script, folder]).split()
    return int(n) / float(seconds), int(n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", default=None, help="keep the JPEG folder and the set here (default: a temporary directory)")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="gradmesh-loader-bench-")
    folder, set_dir = os.path.join(work, "fmnist-jpeg"), os.path.join(work, "fmnist-set")
    if not os.path.isdir(folder):
        start = time.perf_counter()
        count = write_folder(folder)
        print(f"wrote {count} JPEGs in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    if not os.path.exists(os.path.join(set_dir, "index.json")):
        start = time.perf_counter()
        run(TWO_CORES + [GRADMESH, "data", "prepare", "--image-folder", folder, "--output", set_dir, "--workers", "2"])
        prepare_s = time.perf_counter() - start
    else:
        prepare_s = None
    script = os.path.join(work, "torch_loader.py")
    with open(script, "w") as f:
        f.write(TORCH_LOADER)
    a_rates, b_rates, decode_rates, steady_rates = [], [], [], []
    for _ in range(args.runs):
        rate, n_a = ours(set_dir)
        a_rates.append(rate)
        steady_rates.append(ours(set_dir, epochs=5)[0])
        rate, n_b = torch_side(folder, script)
        b_rates.append(rate)
        decode = json.loads(run(ONE_CORE + [GRADMESH, "data", "bench", set_dir, "--decode-only", "--json"]))
        decode_rates.append(decode["samples_per_s"])
    if n_a != n_b:
        sys.exit(f"the sides read different sample counts: {n_a} and {n_b}")
    a, b, d = statistics.median(a_rates), statistics.median(b_rates), statistics.median(decode_rates)
    steady = statistics.median(steady_rates)
    kernels = os.environ.get("OPENBLAS_CORETYPE", "auto")
    print(machine_line())
    print(f"OPENBLAS_CORETYPE: {kernels} (no GEMM here); {n_a} samples per epoch; medians of {args.runs} runs, A B A B")
    if prepare_s is not None:
        print(f"gradmesh data prepare --image-folder (2 workers): {prepare_s:.1f} s, {n_a / prepare_s:.0f} files/s")
    print()
    print("| setup (2 cores, taskset -c 0,1; 1 epoch; crop pad 4 + flip + normalise) | samples/s |")
    print("|---|---|")
    print(f"| A: gradmesh loader, data.workers=2, MDS jpeg shards | {a:,.0f} |")
    print(f"| B: PyTorch DataLoader num_workers=2, torchvision ImageFolder of the same JPEGs | {b:,.0f} |")
    print(f"| A / B (target >= 2.0) | {a / b:.2f} |")
    print(f"| decode limit: libjpeg-turbo alone, one core, from memory | {d:,.0f} |")
    print(f"| A per core / decode limit (target >= 0.8) | {a / 2 / d:.2f} |")
    print(f"| A over 5 epochs (the loader's start-up spread thinner) | {steady:,.0f} |")
    print(f"| A over 5 epochs per core / decode limit | {steady / 2 / d:.2f} |")


if __name__ == "__main__":
    main()
