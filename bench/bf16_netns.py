#!/usr/bin/env python3
"""bf16 against f32 gradients across two emulated hosts.

Two Linux network namespaces joined by a veth pair, each end rate-limited
with `tc tbf` (as ../shared/anchors/torch_ddp_netns.sh sets up the PyTorch
anchor), a password-protected redis-server in the first as the rendezvous
store, and one `gradmesh launch` node per namespace running
`gradmesh train examples/mlp.toml` data-parallel over gloo, one worker each.
Runs alternate parallel.comm_dtype=f32 and bf16, each a fixed number of
steps (drop_last, no evaluation, one thread); the table gives the median
samples/s of each and their ratio. Bytes, not time, are what the tests
check; this script is the timing.

Needs root (namespaces, tc). Removes its namespaces and stops its
redis-server and workers however it ends.

usage: bench/bf16_netns.py [--runs 5] [--rate 200mbit] [--steps 150] [--target 1.6]
"""
import argparse, json, os, signal, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")
ADDRESS = ("10.232.0.1", "10.232.0.2")
PASSWORD = "bf16bench"


def sh(cmd, check=True):
    out = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"'{cmd}' failed ({out.returncode}): {out.stdout.strip()}")
    return out.stdout


class TwoHosts:
    """Namespaces, link, rate limit and redis-server; everything undone by close()."""

    def __init__(self, rate, workdir):
        tag = str(os.getpid())
        self.ns = (f"gmbf{tag}a", f"gmbf{tag}b")
        self.veth = (f"gvbf{tag}a", f"gvbf{tag}b")  # interface names: at most 15 characters
        self.pidfile = os.path.join(workdir, "redis.pid")
        self.workdir = workdir
        self.rate = rate

    def open(self):
        for ns in self.ns:
            sh(f"ip netns add {ns}")
        sh(f"ip link add {self.veth[0]} type veth peer name {self.veth[1]}")
        for i in range(2):
            sh(f"ip link set {self.veth[i]} netns {self.ns[i]}")
            sh(f"ip -n {self.ns[i]} addr add {ADDRESS[i]}/24 dev {self.veth[i]}")
            sh(f"ip -n {self.ns[i]} link set {self.veth[i]} up")
            sh(f"ip -n {self.ns[i]} link set lo up")
            sh(f"ip netns exec {self.ns[i]} tc qdisc add dev {self.veth[i]} root tbf rate {self.rate} "
               "burst 256kb latency 50ms")
        sh(f"{self.prefix(0)} redis-server --port 6379 --bind {ADDRESS[0]} --requirepass {PASSWORD} --save '' "
           f"--appendonly no --dir {self.workdir} --daemonize yes --pidfile {self.pidfile} "
           f"--logfile {self.workdir}/redis.log")
        for _ in range(100):
            if "PONG" in sh(f"{self.prefix(0)} redis-cli -h {ADDRESS[0]} -a {PASSWORD} --no-auth-warning ping",
                            check=False):
                return
            time.sleep(0.1)
        raise RuntimeError("redis-server did not answer; see " + os.path.join(self.workdir, "redis.log"))

    def prefix(self, i):
        return f"ip netns exec {self.ns[i]}"

    def close(self):
        try:
            with open(self.pidfile) as f:
                os.kill(int(f.read().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
        for ns in self.ns:
            sh(f"ip netns del {ns}", check=False)
        sh(f"ip link del {self.veth[0]} 2>/dev/null", check=False)  # if it was created but never moved


def run_two_nodes(hosts, run_id, sets, workdir, timeout=600, config="mlp.toml"):
    """One `gradmesh train examples/<config>` over both hosts (a launcher per
    namespace, one worker each, the redis store); returns rank 0's
    metrics.jsonl as a list of objects."""
    procs = []
    try:
        for node in range(2):
            out_dir = os.path.join(workdir, f"node{node}")
            os.makedirs(out_dir, exist_ok=True)
            cmd = (hosts.prefix(node).split() + ["env", f"GRADMESH_HOSTNAME={ADDRESS[node]}", "GRADMESH_PROGRESS=off",
                                                 GRADMESH, "launch", "--nnodes", "2", "--node-rank", str(node),
                                                 "--nproc-per-node", "1", "--rdzv-id", run_id, "--rdzv-endpoint",
                                                 f"redis://:{PASSWORD}@{ADDRESS[0]}:6379", "--", GRADMESH, "train",
                                                 os.path.join(ROOT, "examples", config),
                                                 "--set", f"output.dir={out_dir}", "--set", f"output.run_id={run_id}"])
            for s in sets:
                cmd += ["--set", s]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outputs = [p.communicate(timeout=timeout)[0] for p in procs]
        for node, p in enumerate(procs):
            if p.returncode != 0:
                raise RuntimeError(f"node {node} of {run_id} exited {p.returncode}:\n{outputs[node][-3000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    with open(os.path.join(workdir, "node0", run_id, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def train(hosts, run_id, dtype, steps, workdir):
    """samples/s of one two-node run (rank 0's summary)."""
    sets = [f"parallel.comm_dtype={dtype}", "parallel.backend=gloo", f"train.max_steps={steps}",
            "data.drop_last=true", "train.threads=1", "train.eval_every_epoch=false", "output.save_weights=false",
            "output.report=false", "output.trace_steps=0"]
    summary = [j for j in run_two_nodes(hosts, run_id, sets, workdir) if j.get("type") == "summary"][-1]
    return summary["samples_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="runs of each dtype, alternating (default 5)")
    p.add_argument("--rate", default="200mbit", help="tc tbf rate of each end of the link (default 200mbit)")
    p.add_argument("--steps", type=int, default=150, help="optimizer steps per run (default 150)")
    p.add_argument("--target", type=float, default=1.6, help="bf16 / f32 samples/s to meet (default 1.6)")
    a = p.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/bf16_netns.py needs root: it creates network namespaces and rate-limits a veth with tc")
    for tool in ("ip", "tc", "redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (iproute2, redis-server)")
    if not os.access(GRADMESH, os.X_OK):
        sys.exit(f"{GRADMESH} not built (cmake --build build --target gradmesh)")
    # SIGTERM/SIGINT unwind through the finally below, so nothing is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    workdir = tempfile.mkdtemp(prefix="gm_bf16_netns_")
    hosts = TwoHosts(a.rate, workdir)
    rates = {"f32": [], "bf16": []}
    try:
        hosts.open()
        for run in range(a.runs):
            # Alternate which dtype goes first, so neither always follows the other.
            for dtype in (("f32", "bf16") if run % 2 == 0 else ("bf16", "f32")):
                rates[dtype].append(train(hosts, f"bf16bench-{run}-{dtype}", dtype, a.steps, workdir))
                print(f"  run {run + 1} {dtype}: {rates[dtype][-1]:,.0f} samples/s", file=sys.stderr)
    finally:
        hosts.close()
        shutil.rmtree(workdir, ignore_errors=True)
    f32, bf16 = statistics.median(rates["f32"]), statistics.median(rates["bf16"])
    ratio = bf16 / f32
    verdict = f">= {a.target}x " + ("met" if ratio >= a.target else "MISSED")
    print(f"setup: 2 network namespaces, veth with tc tbf {a.rate} each way; backend gloo, world size 2 (1 worker "
          f"per namespace, redis store); workload examples/mlp.toml (784-512-512-10, global batch 128, drop_last), "
          f"{a.steps} steps per run, 1 thread; {a.runs} alternating runs each, medians; machine: {os.cpu_count()} cores")
    print("| link | backend | world | workload | f32 samples/s | bf16 samples/s | bf16 / f32 | target |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {a.rate} | gloo | 2 | MLP, {a.steps} steps | {f32:,.0f} | {bf16:,.0f} | {ratio:.2f}x | {verdict} |")
    print(f"runs: f32 {[round(x) for x in rates['f32']]}, bf16 {[round(x) for x in rates['bf16']]}")


if __name__ == "__main__":
    main()
