#!/usr/bin/env python3
"""How the control plane scales: start-up time, sockets per rank and store
traffic of a gloo job against the number of local ranks, with no compute.

For each N: a password-protected redis-server on loopback is the store, and
`gradmesh launch --nproc-per-node N --rdzv-endpoint redis://... -- gradmesh
bench comm --backend gloo` runs 4-byte all-reduces (--iters of them), so the
time is start-up: processes, rendezvous, the Gloo mesh, teardown. While it
runs, the workers' socket descriptors are sampled from /proc (the maximum
over ranks and samples); after it, Redis' own counters give the commands and
bytes the job sent through the store. Then a fit of the wall time against N
(a + b N + c N^2, least squares) and the store traffic per rank.

All ranks share this machine's cores, so the start-up time here includes
N processes time-sharing them; docs/scaling.md turns the per-rank and
per-store figures into a prediction for many hosts.

Connections: --lazy auto (the default: groups of more than 32 ranks connect
each pair when an operation first uses it), 1 (always lazily) or 0 (a full
mesh at start-up), through GRADMESH_GLOO_LAZY.

usage: bench/control_plane.py [--ranks 8,16,32,64,128] [--iters 20] [--lazy auto|1|0] [--port-range LO-HI]
"""
import argparse, os, secrets, shutil, signal, socket, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRADMESH = os.path.join(ROOT, "build", "gradmesh")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self, workdir):
        self.port, self.password, self.workdir = free_port(), secrets.token_hex(12), workdir
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--requirepass",
                                      self.password, "--save", "", "--appendonly", "no", "--dir", workdir,
                                      "--maxclients", "20000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if "PONG" in self.cli("ping"):
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not answer")

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port), "-a", self.password, "--no-auth-warning", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout

    def stats(self):
        out = {}
        for line in self.cli("info", "stats").splitlines():
            if ":" in line:
                k, v = line.strip().split(":", 1)
                out[k] = v
        return {k: int(out.get(k, 0)) for k in ("total_commands_processed", "total_net_input_bytes",
                                                "total_net_output_bytes")}

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def workers_of(pid):
    """Every descendant of pid that runs gradmesh bench (the workers)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def sockets(pid):
    n = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    n += 1
            except OSError:
                pass
    except OSError:
        return 0
    return n


def run(n, iters, workdir, lazy):
    redis = Redis(workdir)
    try:
        redis.cli("config", "resetstat")
        before = redis.stats()
        cmd = [GRADMESH, "launch", "--nproc-per-node", str(n), "--heartbeat-timeout", "0", "--rdzv-id", f"cp{n}",
               "--rdzv-endpoint", f"redis://:{redis.password}@127.0.0.1:{redis.port}", "--", GRADMESH, "bench",
               "comm", "--backend", "gloo", "--min-bytes", "4", "--max-bytes", "4", "--iters", str(iters)]
        env = dict(os.environ, GRADMESH_PROGRESS="off", OPENBLAS_NUM_THREADS="1", GRADMESH_COMM_TIMEOUT="600",
                   GRADMESH_GLOO_LAZY=lazy)
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        most = 0
        while proc.poll() is None:
            for w in workers_of(proc.pid):
                most = max(most, sockets(w))
            time.sleep(0.05)
        wall = time.monotonic() - start
        out = proc.stdout.read()
        if proc.returncode != 0:
            raise RuntimeError(f"{n} ranks: exit {proc.returncode}\n{out[-3000:]}")
        after = redis.stats()
        return {"ranks": n, "wall_s": wall, "sockets_per_rank": most,
                **{k: after[k] - before[k] for k in before}}
    finally:
        redis.close()


def fit_quadratic(xs, ys):
    """Least squares y = a + b x + c x^2 (normal equations, 3x3)."""
    rows = [[1.0, x, x * x] for x in xs]
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(3)]
    for col in range(3):  # Gauss-Jordan
        piv = max(range(col, 3), key=lambda r: abs(ata[r][col]))
        ata[col], ata[piv], aty[col], aty[piv] = ata[piv], ata[col], aty[piv], aty[col]
        for r in range(3):
            if r != col:
                f = ata[r][col] / ata[col][col]
                ata[r] = [a - f * b for a, b in zip(ata[r], ata[col])]
                aty[r] -= f * aty[col]
    return [aty[i] / ata[i][i] for i in range(3)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="8,16,32,64,128", help="local rank counts (default 8,16,32,64,128)")
    p.add_argument("--iters", type=int, default=20, help="4-byte all-reduces per run (default 20)")
    p.add_argument("--lazy", default="auto", choices=["auto", "1", "0"],
                   help="GRADMESH_GLOO_LAZY for the workers (default auto: lazily above 32 ranks)")
    p.add_argument("--port-range", default="", help="set net.ipv4.ip_local_port_range for the runs (root), e.g. 1024-65535")
    a = p.parse_args()
    for tool in ("redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (redis-server)")
    if not os.access(GRADMESH, os.X_OK):
        sys.exit(f"{GRADMESH} not built (cmake --build build --target gradmesh)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    range_file = "/proc/sys/net/ipv4/ip_local_port_range"
    old_range = open(range_file).read().split()
    workdir = tempfile.mkdtemp(prefix="gm_control_plane_")
    rows = []
    try:
        if a.port_range:
            with open(range_file, "w") as f:
                f.write(a.port_range.replace("-", " "))
        for n in [int(x) for x in a.ranks.split(",")]:
            rows.append(run(n, a.iters, workdir, a.lazy))
            r = rows[-1]
            print(f"  {n} ranks: {r['wall_s']:.2f} s, {r['sockets_per_rank']} sockets per rank, "
                  f"{r['total_commands_processed']} store commands", file=sys.stderr)
    finally:
        if a.port_range:
            with open(range_file, "w") as f:
                f.write(" ".join(old_range))
        shutil.rmtree(workdir, ignore_errors=True)
    ports = a.port_range or "-".join(old_range)
    print(f"setup: one host, {os.cpu_count()} cores shared by all ranks; gradmesh launch with a redis store on "
          f"loopback; workers run `gradmesh bench comm --backend gloo` with {a.iters} all-reduces of 4 bytes; "
          f"ephemeral ports {ports}; GRADMESH_GLOO_LAZY={a.lazy}")
    print("| ranks | wall s (start-up + teardown) | sockets per rank | store commands | per rank | store bytes in+out | per rank |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        n = r["ranks"]
        b = r["total_net_input_bytes"] + r["total_net_output_bytes"]
        print(f"| {n} | {r['wall_s']:.2f} | {r['sockets_per_rank']} | {r['total_commands_processed']:,} | "
              f"{r['total_commands_processed'] / n:,.0f} | {b:,} | {b / n:,.0f} |")
    if len(rows) >= 3:
        a0, b1, c2 = fit_quadratic([r["ranks"] for r in rows], [r["wall_s"] for r in rows])
        print(f"fit: wall_s = {a0:.3f} + {b1:.5f} N + {c2:.7f} N^2")


if __name__ == "__main__":
    main()
