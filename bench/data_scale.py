#!/usr/bin/env python3
"""The worked example, emulated: a 10-million-sample image set read by 20 hosts.

A set of 28x28 images (Fashion-MNIST's training images repeated, labels with
them) is written as MDS shards of 64 MB at 1 M and at 10 M samples. The
reference MLP then trains for a fixed number of steps on 20 emulated hosts
(gradmesh bench scaling --hosts netns:20: network namespaces, one worker
each, gloo between them, shards on this machine's disk as on a shared
filesystem), reading its slice of each global batch from the shards:

- bytes read per host (metering's dataset_read_bytes, per rank), scaled to a
  whole epoch (bytes / (steps x global batch / set size)), against the set's
  bytes / 20 (target <= 1.2 x);
- peak RSS per rank at 1 M and at 10 M samples (target: within 10%), and the
  same job on the IDX files loaded whole (Fashion-MNIST, 60,000 samples, in
  every rank) for the in-memory figure (target: the sharded run >= 100 MB below).

With --whole-epoch the 1 M set is also trained for one whole epoch (391 steps),
where bytes per host are measured, not scaled.

Needs root (network namespaces). usage: bench/data_scale.py [--steps N] [--work DIR] [--hosts K] [--whole-epoch]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loader import machine_line  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
DATA = os.environ.get("GRADMESH_DATA_DIR", "/usr/share/datasets/fashion-mnist")
SHARD_BYTES = 64 << 20


def write_set(path, samples):
    """An MDS set of `samples` 1x28x28 uint8 images ("x") and int labels ("y"), as MdsWriter writes it."""
    import gzip
    import numpy as np
    import xxhash
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8).astype("<i8")
    os.makedirs(path, exist_ok=True)
    columns = {"column_encodings": ["ndarray:uint8:1,28,28", "int"], "column_names": ["x", "y"],
               "column_sizes": [784, 8], "compression": None, "format": "mds", "hashes": ["xxh64"],
               "size_limit": SHARD_BYTES, "version": 2}
    config = json.dumps(columns, separators=(",", ":")).encode()
    per_shard = (SHARD_BYTES - 4 - len(config)) // (792 + 4)
    shards, start = [], 0
    while start < samples:
        n = min(per_shard, samples - start)
        idx = np.arange(start, start + n) % len(images)
        body = np.empty((n, 792), np.uint8)
        body[:, :784] = images[idx]
        body[:, 784:] = labels[idx].view(np.uint8).reshape(-1, 8)
        header_len = 4 + 4 * (n + 1) + len(config)
        offsets = (header_len + 792 * np.arange(n + 1)).astype("<u4")
        blob = np.uint32(n).astype("<u4").tobytes() + offsets.tobytes() + config + body.tobytes()
        name = f"shard.{len(shards):05d}.mds"
        with open(os.path.join(path, name), "wb") as f:
            f.write(blob)
        entry = dict(columns)
        entry.update({"raw_data": {"basename": name, "bytes": len(blob), "hashes": {"xxh64": xxhash.xxh64_hexdigest(blob)}},
                      "samples": n, "zip_data": None})
        shards.append(entry)
        start += n
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump({"shards": shards, "version": 2}, f)
    return sum(s["raw_data"]["bytes"] for s in shards)


def probe(sets, hosts, steps, keep):
    cmd = [GRADMESH, "bench", "scaling", os.path.join(ROOT, "examples", "mlp.toml"), "--workers", str(hosts),
           "--hosts", f"netns:{hosts}", "--steps", str(steps), "--warmup", "0", "--keep", keep]
    for s in sets + ["train.threads=1", "data.prefetch=2"]:
        cmd += ["--set", s]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        sys.exit(f"bench scaling failed ({out.returncode}):\n{out.stdout[-3000:]}")
    metrics = os.path.join(keep, "host0", f"probe-{hosts}", "metrics.jsonl")
    lines = [json.loads(l) for l in open(metrics)]
    usage = [l for l in lines if l.get("type") == "usage"][-1]
    summary = [l for l in lines if l.get("type") == "summary"][-1]
    read = usage["ranks"]["dataset_read_bytes"]
    return read, summary["peak_rss_bytes_per_rank"], summary["steps"], summary["samples"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--batch", type=int, default=2560, help="global batch (128 per host at 20 hosts)")
    ap.add_argument("--work", default=None)
    ap.add_argument("--whole-epoch", action="store_true", help="also train one whole epoch of the 1 M set")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="gradmesh-data-scale-")
    print(machine_line())
    print(f"{args.hosts} emulated hosts (netns, one worker each, gloo), reference MLP, train.threads=1, "
          f"global batch {args.batch}, {args.steps} steps")
    print()
    print("| set | set bytes | bytes read per host (median, max) | per epoch / (set / hosts) (target <= 1.2) | peak RSS per rank (median, max) |")
    print("|---|---|---|---|---|")
    rss = {}
    # The two sizes for a fixed number of steps, then the 1 M set for one whole epoch.
    runs = [(1_000_000, args.steps), (10_000_000, args.steps)]
    if args.whole_epoch:
        runs.append((1_000_000, -(-1_000_000 // args.batch)))
    for samples, steps in runs:
        path = os.path.join(work, f"set-{samples}")
        if not os.path.exists(os.path.join(path, "index.json")):
            write_set(path, samples)
        set_bytes = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".mds"))
        keep = os.path.join(work, f"probe-{samples}-{steps}")
        read, peaks, steps, seen = probe(["data.format=\"mds\"", f"data.train_set={path}",
                                          f"train.batch_size={args.batch}"], args.hosts, steps, keep)
        epoch_share = min(1.0, seen / samples)
        ratio = max(read) / epoch_share / (set_bytes / args.hosts)
        rss.setdefault(samples, statistics.median(peaks))
        print(f"| MDS, {samples:,} samples, {steps} steps | {set_bytes / 1e9:.2f} GB | {statistics.median(read) / 1e6:.1f} MB, "
              f"{max(read) / 1e6:.1f} MB ({seen:,} samples read in all) | {ratio:.3f} (max host) | "
              f"{statistics.median(peaks) / 2**20:.0f} MiB, {max(peaks) / 2**20:.0f} MiB |")
    keep = os.path.join(work, "probe-idx")
    read, peaks, _, _ = probe([f"train.batch_size={args.batch}"], args.hosts, args.steps, keep)
    print(f"| IDX, Fashion-MNIST loaded whole (60,000) | - | {statistics.median(read) / 1e6:.1f} MB | - | "
          f"{statistics.median(peaks) / 2**20:.0f} MiB, {max(peaks) / 2**20:.0f} MiB |")
    print()
    print(f"peak RSS 10 M / 1 M: {rss[10_000_000] / rss[1_000_000]:.3f} (target within 10%); "
          f"IDX - MDS at 10 M: {(statistics.median(peaks) - rss[10_000_000]) / 2**20:.0f} MiB (target >= 100 MB)")


if __name__ == "__main__":
    main()
