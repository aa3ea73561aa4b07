#!/usr/bin/env python3
"""torch.distributed backend "gradmesh" against "gloo": the same PyTorch script,
the same cores, only the backend name differs.

Parts:
  ddp        The DDP anchor of bench/ddp.py (../shared/anchors/torch_fmnist.py:
             reference MLP and CNN, one epoch, global batch 128, SGD, one
             thread per worker), 2 workers on this host, with its
             init_process_group("gloo") line made to read the backend name
             from the environment (and import gradmesh.torch). Runs alternate
             gloo, gradmesh, gloo, ...; medians of samples/s. Two more rows
             bound what any backend can reach: DDP with a hook that
             communicates nothing, and two single processes side by side.
  allreduce  dist.all_reduce of float32 tensors, 4 KB to 64 MB, 2 ranks on this
             host: time per call and bus bandwidth (2(n-1)/n x bytes / time).
  netns      Two emulated hosts (network namespaces, a veth pair, tc tbf at
             --rate on each end), one worker per host: the anchor on gloo
             against the anchor on gradmesh with gradmesh.torch.bf16_gradient_hook,
             the MLP for --epochs; samples/s and test accuracy. Needs root.

usage: bench/torch_backend.py [--parts ddp,allreduce,netns] [--runs 3] [--rate 1gbit] [--epochs 1]
"""
import argparse, os, platform, re, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_netns import ADDRESS, TwoHosts  # noqa: E402

ANCHORS = os.path.join(os.path.dirname(ROOT), "shared", "anchors")
PYTHON = "/usr/bin/python3"
PYTHONPATH = os.path.join(ROOT, "build", "python")
INIT_LINE = 'if ddp: dist.init_process_group("gloo")'
# The only change to the anchor: the backend's name comes from BACKEND; a hook
# (HOOK=noop: no communication; HOOK=bf16: gradmesh's) may be registered.
INIT_BY_NAME = '''if ddp:
        if os.environ["BACKEND"] == "gradmesh": import gradmesh.torch
        dist.init_process_group(os.environ["BACKEND"])'''
DDP_LINE = "    if ddp: m = nn.parallel.DistributedDataParallel(m)\n"
DDP_WITH_HOOK = '''    if ddp:
        m = nn.parallel.DistributedDataParallel(m)
        if os.environ.get("HOOK") == "noop":
            def noop(state, bucket):
                fut = torch.futures.Future(); fut.set_result(bucket.buffer()); return fut
            m.register_comm_hook(None, noop)
        elif os.environ.get("HOOK") == "bf16":
            m.register_comm_hook(None, gradmesh.torch.bf16_gradient_hook)
'''
ALLREDUCE = r'''
import os, time, torch, torch.distributed as dist
if os.environ["BACKEND"] == "gradmesh": import gradmesh.torch
dist.init_process_group(os.environ["BACKEND"])
rank, world = dist.get_rank(), dist.get_world_size()
for size in [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]:
    t = torch.ones(size // 4)
    iters = max(5, min(500, (512 << 20) // size))
    for _ in range(3): dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters): dist.all_reduce(t)
    dt = (time.perf_counter() - t0) / iters
    if rank == 0: print(f"size={size} seconds={dt:.9f}", flush=True)
'''


def cpu_line():
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{model}, {os.cpu_count()} cores, {' '.join(shown)}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'auto')}"


def anchor_script(workdir):
    src = open(os.path.join(ANCHORS, "torch_fmnist.py")).read()
    if INIT_LINE not in src or DDP_LINE not in src:
        sys.exit("the anchor script changed: its init_process_group or DDP line is not where expected")
    path = os.path.join(workdir, "torch_fmnist_backend.py")
    with open(path, "w") as f:
        f.write(src.replace(INIT_LINE, INIT_BY_NAME).replace(DDP_LINE, DDP_WITH_HOOK))
    return path


def run(cmd, env, timeout=1800):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {' '.join(cmd)}\n{out.stdout[-3000:]}")
    return out.stdout


def env_for(backend, **extra):
    return dict(os.environ, BACKEND=backend, PYTHONPATH=PYTHONPATH, OMP_NUM_THREADS="1", MASTER_PORT="29631",
                PYTHONWARNINGS="ignore", **extra)


def samples_per_s(text):
    m = re.search(r"samples/s=(\d+) test_acc=([\d.]+)", text)
    if not m:
        sys.exit(f"no samples/s in:\n{text[-2000:]}")
    return float(m.group(1)), float(m.group(2))


def ddp_part(script, runs):
    launch = os.path.join(ANCHORS, "torch_ddp_launch.sh")
    print("\n## DDP, 2 workers on this host (samples/s, median of", runs, "runs alternating)\n")
    print("| model | gloo | gradmesh | gradmesh / gloo | no communication (DDP, noop hook) | 2 single processes side by side | target |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("mlp", "cnn"):
        rows = {"gloo": [], "gradmesh": [], "noop": [], "alone": []}
        accuracy = {}
        for _ in range(runs):
            for backend in ("gloo", "gradmesh"):
                s, acc = samples_per_s(run(["bash", launch, "2", script, kind, "1", "128"], env_for(backend)))
                rows[backend].append(s)
                accuracy[backend] = acc
        rows["noop"].append(samples_per_s(run(["bash", launch, "2", script, kind, "1", "128"],
                                              env_for("gloo", HOOK="noop")))[0])
        alone = [subprocess.Popen([PYTHON, script, kind, "1", "64"], env=env_for("gloo"), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for _ in range(2)]
        rows["alone"].append(sum(samples_per_s(p.communicate()[0])[0] for p in alone))
        med = {k: statistics.median(v) for k, v in rows.items()}
        ratio = med["gradmesh"] / med["gloo"]
        print(f"| {kind} | {med['gloo']:.0f} | {med['gradmesh']:.0f} | **{ratio:.2f}x** | {med['noop']:.0f} "
              f"({med['noop'] / med['gloo']:.2f}x gloo) | {med['alone']:.0f} | 2x: {'met' if ratio >= 2 else 'missed'} |")
        print(f"|  | acc {accuracy['gloo']:.4f} | acc {accuracy['gradmesh']:.4f} |  |  |  |  |")
        print(f"<!-- {kind} runs: {rows} -->")


def allreduce_part(workdir):
    path = os.path.join(workdir, "allreduce.py")
    with open(path, "w") as f:
        f.write(ALLREDUCE)
    launch = os.path.join(ANCHORS, "torch_ddp_launch.sh")
    results = {}
    for backend in ("gloo", "gradmesh", "gloo", "gradmesh"):
        for line in run(["bash", launch, "2", path], env_for(backend)).splitlines():
            m = re.match(r"size=(\d+) seconds=([\d.]+)", line)
            if m:
                results.setdefault((backend, int(m.group(1))), []).append(float(m.group(2)))
    print("\n## all_reduce from Python, float32, 2 ranks on this host (best of 2 runs)\n")
    print("| size | gloo time | gloo bus GB/s | gradmesh time | gradmesh bus GB/s | gradmesh / gloo |")
    print("|---|---|---|---|---|---|")
    for size in sorted({s for _, s in results}):
        g, m = min(results[("gloo", size)]), min(results[("gradmesh", size)])
        label = f"{size >> 20} MB" if size >= 1 << 20 else f"{size >> 10} KB"
        bus = lambda t: size / t / 1e9  # 2(n-1)/n = 1 for n = 2
        print(f"| {label} | {g * 1e6:.0f} us | {bus(g):.2f} | {m * 1e6:.0f} us | {bus(m):.2f} | {g / m:.1f}x |")


def netns_part(script, rate, epochs, runs):
    if os.geteuid() != 0:
        sys.exit("netns needs root")
    rows = {"gloo": [], "gradmesh+bf16": []}
    accuracy = {}
    with tempfile.TemporaryDirectory() as workdir:
        hosts = TwoHosts(rate, workdir)
        try:
            hosts.open()
            for _ in range(runs):
                for label, backend, hook in (("gloo", "gloo", ""), ("gradmesh+bf16", "gradmesh", "bf16")):
                    procs = []
                    for i in range(2):
                        # One launcher node per emulated host: GROUP_RANK names it, as torchrun would.
                        env = env_for(backend, HOOK=hook, RANK=str(i), LOCAL_RANK="0", WORLD_SIZE="2",
                                      LOCAL_WORLD_SIZE="1", GROUP_RANK=str(i), MASTER_ADDR=ADDRESS[0],
                                      GRADMESH_HOSTNAME=ADDRESS[i], GLOO_SOCKET_IFNAME=hosts.veth[i])
                        cmd = hosts.prefix(i).split() + ["env"] + [f"{k}={v}" for k, v in env.items()
                                                                    if k in ("BACKEND", "HOOK", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "GRADMESH_HOSTNAME", "GLOO_SOCKET_IFNAME", "PYTHONPATH", "OMP_NUM_THREADS", "PYTHONWARNINGS")]
                        procs.append(subprocess.Popen(cmd + [PYTHON, script, "mlp", str(epochs), "128"],
                                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
                    outs = [p.communicate(timeout=3600)[0] for p in procs]
                    if any(p.returncode for p in procs):
                        sys.exit(f"{label} failed:\n{outs[0][-2000:]}\n{outs[1][-2000:]}")
                    s, acc = samples_per_s(outs[0])
                    rows[label].append(s)
                    accuracy[label] = acc
        finally:
            hosts.close()
    g, m = statistics.median(rows["gloo"]), statistics.median(rows["gradmesh+bf16"])
    print(f"\n## Two emulated hosts, {rate} each way, one worker per host, MLP, {epochs} epoch(s) (median of {runs})\n")
    print("| side | samples/s | test accuracy |")
    print("|---|---|---|")
    print(f"| DDP on gloo | {g:.0f} | {accuracy['gloo']:.4f} |")
    print(f"| DDP on gradmesh, bf16_gradient_hook | {m:.0f} | {accuracy['gradmesh+bf16']:.4f} |")
    ratio, gap = m / g, abs(accuracy["gloo"] - accuracy["gradmesh+bf16"])
    print(f"\nratio **{ratio:.2f}x** (target 1.6x: {'met' if ratio >= 1.6 else 'missed'}); accuracy gap {gap:.4f} "
          f"(target 0.01: {'met' if gap <= 0.01 else 'missed'})")
    print(f"<!-- runs: {rows} -->")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="ddp,allreduce,netns")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(PYTHONPATH, "gradmesh", "torch")):
        sys.exit("gradmesh.torch is not built: make python")
    print(f"Machine: {cpu_line()}; PyTorch 1.13 (Debian), Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as workdir:
        script = anchor_script(workdir)
        parts = a.parts.split(",")
        if "ddp" in parts:
            ddp_part(script, a.runs)
        if "allreduce" in parts:
            allreduce_part(workdir)
        if "netns" in parts:
            netns_part(script, a.rate, a.epochs, a.runs)


if __name__ == "__main__":
    main()
