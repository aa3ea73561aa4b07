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

Stores (--store): redis (the default, as above); etcd: the same job on a
3-member etcd cluster on loopback (/usr/bin/etcd, flags as in
tests/comm/etcd_cluster.h), its traffic from the members' /metrics (unary gRPC
calls and gRPC bytes behind the JSON gateway, summed over members); both: for
each N, Redis and etcd alternately (A B A B, --repeats each, a fresh store for
every run), one table of medians: the whole run, etcd/Redis, and the phases
read from timestamps taken here as they happen (the launcher's log line that
its rendezvous closed; the store's own key-change notifications: Redis
keyspace events, an etcd watch):
  launcher rendezvous  launch start -> "launch: run ... generation 0" line
  worker rendezvous    the last rank's first store write (gloo/instances/<r>)
                       -> the first rank's goodbye (gloo/<i>/bye), less the
                       timed all-reduces: address exchange, connections
  teardown             the first goodbye -> the launcher's exit

usage: bench/control_plane.py [--ranks 8,16,32,64,128] [--iters 20] [--lazy auto|1|0] [--port-range LO-HI]
                              [--store redis|etcd|both] [--repeats R] [--gradmesh PATH]
"""
import argparse, base64, http.client, json, os, re, secrets, shutil, signal, socket, statistics, subprocess, sys
import tempfile, threading, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ETCD = "/usr/bin/etcd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stamp_promptly():
    """Raises the calling thread's priority (nice -10; Linux's nice is per thread), so that a thread stamping
    arrivals is not left waiting behind N busy ranks; the ranks and stores keep nice 0. Unprivileged: unchanged."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
    except OSError:
        pass


class KeyWatch:
    """The store's key writes as they happen: (time.monotonic() on arrival here, key)."""

    def __init__(self):
        self.events = []
        self._thread = threading.Thread(target=self._pump, daemon=True)

    def _pump(self):
        stamp_promptly()
        try:
            self._read()
        except (OSError, ValueError, EOFError, http.client.HTTPException):
            pass  # closed

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(timeout=5)


def resp_command(*args):
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in parts)


def resp_read(f):
    line = f.readline()
    if not line:
        raise EOFError
    kind, rest = line[:1], line[1:-2]
    if kind in b"+-:":
        return rest
    if kind == b"$":
        return None if int(rest) < 0 else f.read(int(rest) + 2)[:-2]
    if kind == b"*":
        return [resp_read(f) for _ in range(int(rest))]
    raise ValueError(f"unexpected reply {line!r}")


class RedisKeyWatch(KeyWatch):
    """Redis keyspace notifications for string commands (SET, INCRBY, also from scripts: all gradmesh writes)."""

    def __init__(self, port, password):
        super().__init__()
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._file = self._sock.makefile("rb")
        for cmd in (("AUTH", password), ("CONFIG", "SET", "notify-keyspace-events", "K$"),
                    ("PSUBSCRIBE", "__keyspace@0__:*")):
            self._sock.sendall(resp_command(*cmd))
            reply = resp_read(self._file)
            if isinstance(reply, bytes) and reply.startswith(b"ERR"):
                raise RuntimeError(f"redis {cmd[0]}: {reply.decode()}")
        self._thread.start()  # subscribed: PSUBSCRIBE answered

    def _read(self):
        while True:
            msg = resp_read(self._file)
            if isinstance(msg, list) and msg[0] == b"pmessage":
                self.events.append((time.monotonic(), msg[2].split(b":", 1)[1].decode("latin-1")))


class EtcdKeyWatch(KeyWatch):
    """An etcd watch on gradmesh's key prefix through the JSON gateway (POST /v3/watch, one JSON object a line)."""

    PREFIX = "gradmesh/kv/"

    def __init__(self, port):
        super().__init__()
        b64 = lambda t: base64.b64encode(t.encode()).decode()
        self._conn = http.client.HTTPConnection("127.0.0.1", port)
        body = {"create_request": {"key": b64(self.PREFIX), "range_end": b64(self.PREFIX[:-1] + "0")}}
        self._conn.request("POST", "/v3/watch", json.dumps(body), {"Content-Type": "application/json"})
        self._resp = self._conn.getresponse()
        self._sock = self._conn.sock
        first = json.loads(self._resp.readline())
        if not first.get("result", {}).get("created"):
            raise RuntimeError(f"etcd watch not created: {first}")
        self._thread.start()

    def _read(self):
        for line in self._resp:
            now = time.monotonic()
            if not line.strip():
                continue
            for ev in json.loads(line).get("result", {}).get("events", []):
                key = base64.b64decode(ev["kv"]["key"]).decode("latin-1")
                self.events.append((now, key[len(self.PREFIX):]))


class Redis:
    name, requests_word = "redis", "commands"

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

    def endpoint(self):
        return f"redis://:{self.password}@127.0.0.1:{self.port}"

    def traffic(self):
        out = {}
        for line in self.cli("info", "stats").splitlines():
            if ":" in line:
                k, v = line.strip().split(":", 1)
                out[k] = v
        get = lambda k: int(out.get(k, 0))
        return {"requests": get("total_commands_processed"),
                "bytes": get("total_net_input_bytes") + get("total_net_output_bytes")}

    def watch(self):
        return RedisKeyWatch(self.port, self.password)

    def close(self):
        self.proc.terminate()
        self.proc.wait()


class EtcdCluster:
    """3 etcd members on loopback, started as tests/comm/etcd_cluster.h starts them: free client and peer ports,
    a data directory each, elections 2x faster than etcd's defaults (heartbeat 50 ms, election 500 ms); ready when
    every member's /health says true (it sees a leader). A member that lost a port race exits: start again."""
    name, requests_word = "etcd", "requests"

    def __init__(self, workdir, size=3):
        self.dir = tempfile.mkdtemp(prefix="etcd_", dir=workdir)
        for attempt in range(3):
            self.ports, self.procs = [free_port() for _ in range(size)], []
            peers = [f"http://127.0.0.1:{free_port()}" for _ in range(size)]
            cluster = ",".join(f"m{i}={u}" for i, u in enumerate(peers))
            for i in range(size):
                client, data = f"http://127.0.0.1:{self.ports[i]}", os.path.join(self.dir, f"{attempt}-m{i}")
                with open(data + ".log", "w") as log:
                    self.procs.append(subprocess.Popen(
                        [ETCD, "--name", f"m{i}", "--data-dir", data, "--listen-client-urls", client,
                         "--advertise-client-urls", client, "--listen-peer-urls", peers[i],
                         "--initial-advertise-peer-urls", peers[i], "--initial-cluster", cluster,
                         "--initial-cluster-state", "new", "--initial-cluster-token", f"bench-{os.getpid()}-{attempt}",
                         "--heartbeat-interval", "50", "--election-timeout", "500"],
                        stdout=log, stderr=subprocess.STDOUT))
            if all(self._healthy(i, 20) for i in range(size)):
                return
            self.close()
        raise RuntimeError(f"the etcd cluster did not become healthy; member logs in {self.dir}")

    def _get(self, i, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[i]}{path}", timeout=5) as r:
            return r.read().decode()

    def _healthy(self, i, limit_s):
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and self.procs[i].poll() is None:
            try:
                if '"true"' in self._get(i, "/health"):
                    return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def endpoint(self):
        return "etcd://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def traffic(self):
        """Unary gRPC calls (the gateway's requests: Range, Put, Txn, Lease*) and gRPC message bytes, all members."""
        requests = nbytes = 0
        for i in range(len(self.ports)):
            for line in self._get(i, "/metrics").splitlines():
                if line.startswith("grpc_server_handled_total{") and 'grpc_type="unary"' in line:
                    requests += int(float(line.rsplit(" ", 1)[1]))
                elif line.startswith(("etcd_network_client_grpc_received_bytes_total ",
                                      "etcd_network_client_grpc_sent_bytes_total ")):
                    nbytes += int(float(line.rsplit(" ", 1)[1]))
        return {"requests": requests, "bytes": nbytes}

    def watch(self):
        return EtcdKeyWatch(self.ports[0])

    def close(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def descendants(pid):
    """Every descendant of pid (under a launcher: its workers); bench/multi_node_faults.py uses it too."""
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


RDZV_CLOSED = re.compile(r"launch: run '.*' generation \d+, node")  # logged once the launchers' rendezvous closed
JOINED_KEY = re.compile(r"/gloo/instances/(\d+)$")  # a worker's first store write (GlooProcessGroup)
GOODBYE_KEY = re.compile(r"/gloo/\d+/bye$")  # a worker's group is done (GlooProcessGroup::say_goodbye)
ALLREDUCE_US = re.compile(r"\[rank 0\]:\s+4\s+([0-9.]+)")


def phases(start, end, lines, events, n, ops_s):
    """Seconds of each phase from the launcher's timestamped lines and the store's key writes; the worker
    rendezvous less ops_s, the timed all-reduces (rank 0's report: the slowest rank's mean, times --iters)."""
    closed = next((t for t, line in lines if RDZV_CLOSED.search(line)), None)
    ranks, joined = set(), None
    for t, key in events:
        m = JOINED_KEY.search(key)
        if m and joined is None:
            ranks.add(m.group(1))
            joined = t if len(ranks) == n else None
    goodbye = next((t for t, key in events if GOODBYE_KEY.search(key)), None)
    span = lambda t0, t1: t1 - t0 if t0 is not None and t1 is not None else None
    worker = span(joined, goodbye)
    return {"launcher_rdzv_s": span(start, closed), "spawn_s": span(closed, joined), "worker_span_s": worker,
            "worker_rdzv_s": worker - ops_s if worker is not None and ops_s is not None else None,
            "teardown_s": span(goodbye, end)}


def run(n, iters, workdir, lazy, store_kind, gradmesh, watch):
    store = Redis(workdir) if store_kind == "redis" else EtcdCluster(workdir)
    watcher = None
    try:
        if watch:
            watcher = store.watch()
            time.sleep(0.5)  # let a just-elected etcd cluster (and Redis, alike) settle before the clock starts
        before = store.traffic()
        cmd = [gradmesh, "launch", "--nproc-per-node", str(n), "--heartbeat-timeout", "0", "--rdzv-id", f"cp{n}",
               "--rdzv-endpoint", store.endpoint(), "--", gradmesh, "bench",
               "comm", "--backend", "gloo", "--min-bytes", "4", "--max-bytes", "4", "--iters", str(iters)]
        env = dict(os.environ, GRADMESH_PROGRESS="off", OPENBLAS_NUM_THREADS="1", GRADMESH_COMM_TIMEOUT="600",
                   GRADMESH_GLOO_LAZY=lazy)
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        lines = []  # (arrival time, line): the launcher's "rendezvous closed" line is the one that matters
        reader = threading.Thread(target=lambda: stamp_promptly() or lines.extend(
            (time.monotonic(), line) for line in proc.stdout))
        reader.start()
        most = 0
        while proc.poll() is None:
            for w in descendants(proc.pid):
                most = max(most, sockets(w))
            try:
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        end = time.monotonic()
        reader.join()
        out = "".join(line for _, line in lines)
        if proc.returncode != 0:
            raise RuntimeError(f"{n} ranks on {store.name}: exit {proc.returncode}\n{out[-3000:]}")
        after = store.traffic()
        m = ALLREDUCE_US.search(out)
        allreduce_us = float(m.group(1)) if m else None
        ops_s = iters * allreduce_us / 1e6 if m else None
        return {"store": store.name, "ranks": n, "wall_s": end - start, "sockets_per_rank": most,
                "requests": after["requests"] - before["requests"], "bytes": after["bytes"] - before["bytes"],
                "allreduce_us": allreduce_us, **phases(start, end, lines, watcher.events if watcher else [], n, ops_s)}
    finally:
        if watcher:
            watcher.close()
        store.close()


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


def machine_line():
    lscpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
    field = lambda name: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith(name)), "?")
    flags = field("Flags:").split()
    wanted = [f for f in flags if f in ("avx2", "avx512f", "avx512_bf16") or f.startswith("amx")]
    return f"CPU: {field('Model name:')}, {os.cpu_count()} cores ({' '.join(wanted) or 'no avx2'})"


def version(cmd):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    return out.splitlines()[0].strip() if out else "?"


def median(rows, key):
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None


def fmt(value, scale=1.0, digits=0):
    return "n/a" if value is None else f"{value * scale:,.{digits}f}"


def ratio(a, b):
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def print_comparison(rows, a):
    """--store both: medians per N, Redis against etcd."""
    print(f"setup: one host; {machine_line()}; {version(['redis-server', '--version'])}; "
          f"{version([ETCD, '--version'])} (3 members on loopback, heartbeat 50 ms, election 500 ms); "
          f"`{a.gradmesh} launch --nproc-per-node N` running `bench comm --backend gloo` with {a.iters} all-reduces "
          f"of 4 bytes; GRADMESH_GLOO_LAZY={a.lazy}; Redis and etcd alternately, median of {a.repeats} runs each, "
          f"a fresh store every run")
    print("| ranks | whole run s, Redis | etcd | etcd/Redis | launcher rendezvous ms, Redis | etcd "
          "| worker rendezvous ms, Redis | etcd | etcd/Redis | teardown ms, Redis | etcd | store requests, Redis "
          "| etcd |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in sorted({r["ranks"] for r in rows}):
        red = [r for r in rows if r["ranks"] == n and r["store"] == "redis"]
        etc = [r for r in rows if r["ranks"] == n and r["store"] == "etcd"]
        m = {(s, k): median(g, k) for s, g in (("r", red), ("e", etc))
             for k in ("wall_s", "launcher_rdzv_s", "worker_rdzv_s", "teardown_s", "requests")}
        print(f"| {n} | {fmt(m['r', 'wall_s'], 1, 2)} | {fmt(m['e', 'wall_s'], 1, 2)} | "
              f"{ratio(m['e', 'wall_s'], m['r', 'wall_s'])} | {fmt(m['r', 'launcher_rdzv_s'], 1e3)} | "
              f"{fmt(m['e', 'launcher_rdzv_s'], 1e3)} | {fmt(m['r', 'worker_rdzv_s'], 1e3)} | "
              f"{fmt(m['e', 'worker_rdzv_s'], 1e3)} | {ratio(m['e', 'worker_rdzv_s'], m['r', 'worker_rdzv_s'])} | "
              f"{fmt(m['r', 'teardown_s'], 1e3)} | {fmt(m['e', 'teardown_s'], 1e3)} | "
              f"{fmt(m['r', 'requests'])} | {fmt(m['e', 'requests'])} |")
    print("whole run: launch start -> launcher exit. launcher rendezvous: launch start -> its 'generation 0' log "
          "line (launcher start, store connection, the one-node rendezvous). worker rendezvous: the last rank's "
          "first store write -> the first rank's goodbye, less the timed all-reduces (address exchange, "
          "connections, warm-up). teardown: the first goodbye -> launcher exit (the goodbye counter, exits). "
          "Times stamped on arrival in this process. Store requests: Redis commands; etcd unary gRPC calls behind "
          "the JSON gateway, all members.")


def print_scaling(rows, a):
    """--store redis or etcd: every run, as the scaling table has always been."""
    ports = a.port_range or "-".join(a.old_range)
    store = "a redis store" if a.store == "redis" else "a 3-member etcd cluster"
    word = "commands" if a.store == "redis" else "requests"
    print(f"setup: one host, {os.cpu_count()} cores shared by all ranks; gradmesh launch with {store} on "
          f"loopback; workers run `gradmesh bench comm --backend gloo` with {a.iters} all-reduces of 4 bytes; "
          f"ephemeral ports {ports}; GRADMESH_GLOO_LAZY={a.lazy}")
    print(f"| ranks | wall s (start-up + teardown) | sockets per rank | store {word} | per rank | store bytes in+out "
          "| per rank |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        n, b = r["ranks"], r["bytes"]
        print(f"| {n} | {r['wall_s']:.2f} | {r['sockets_per_rank']} | {r['requests']:,} | "
              f"{r['requests'] / n:,.0f} | {b:,} | {b / n:,.0f} |")
    if len({r["ranks"] for r in rows}) >= 3:
        a0, b1, c2 = fit_quadratic([r["ranks"] for r in rows], [r["wall_s"] for r in rows])
        print(f"fit: wall_s = {a0:.3f} + {b1:.5f} N + {c2:.7f} N^2")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default=None,
                   help="local rank counts (default 8,16,32,64,128; with --store both 2,4,8,16,32,64)")
    p.add_argument("--iters", type=int, default=20, help="4-byte all-reduces per run (default 20)")
    p.add_argument("--lazy", default="auto", choices=["auto", "1", "0"],
                   help="GRADMESH_GLOO_LAZY for the workers (default auto: lazily above 32 ranks)")
    p.add_argument("--port-range", default="", help="set net.ipv4.ip_local_port_range for the runs (root), e.g. 1024-65535")
    p.add_argument("--store", default="redis", choices=["redis", "etcd", "both"],
                   help="the rendezvous store (default redis); both: Redis and etcd alternately, medians side by side")
    p.add_argument("--repeats", type=int, default=None, help="runs per N and store (default 1; 5 with --store both)")
    p.add_argument("--gradmesh", default=os.path.join(ROOT, "build", "gradmesh"),
                   help="the gradmesh binary (default build/gradmesh; a copy measures while build/ is rebuilt)")
    a = p.parse_args()
    a.ranks = a.ranks or ("2,4,8,16,32,64" if a.store == "both" else "8,16,32,64,128")
    a.repeats = a.repeats or (5 if a.store == "both" else 1)
    a.gradmesh = os.path.abspath(a.gradmesh)
    tools = {"redis": ["redis-server", "redis-cli"], "etcd": [ETCD], "both": ["redis-server", "redis-cli", ETCD]}
    for tool in tools[a.store]:
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (Debian packages redis-server, etcd-server)")
    if not os.access(a.gradmesh, os.X_OK):
        sys.exit(f"{a.gradmesh} not built (cmake --build build --target gradmesh)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    range_file = "/proc/sys/net/ipv4/ip_local_port_range"
    a.old_range = open(range_file).read().split()
    workdir = tempfile.mkdtemp(prefix="gm_control_plane_")
    stores = ["redis", "etcd"] if a.store == "both" else [a.store]
    rows = []
    try:
        if a.port_range:
            with open(range_file, "w") as f:
                f.write(a.port_range.replace("-", " "))
        for n in [int(x) for x in a.ranks.split(",")]:
            for rep in range(a.repeats):
                for store in stores:  # A B A B: the machine's noise falls on both stores alike
                    rows.append(run(n, a.iters, workdir, a.lazy, store, a.gradmesh, watch=a.store == "both"))
                    r = rows[-1]
                    ms = lambda k: fmt(r[k], 1e3) + " ms"
                    detail = (f"launcher rendezvous {ms('launcher_rdzv_s')}, spawn {ms('spawn_s')}, worker "
                              f"rendezvous {ms('worker_rdzv_s')} ({ms('worker_span_s')} with the all-reduces of "
                              f"{fmt(r['allreduce_us'], 1, 1)} us), teardown {ms('teardown_s')}, "
                              if a.store == "both" else "")
                    print(f"  {n} ranks, {store} run {rep + 1}: {r['wall_s']:.2f} s, {detail}{r['sockets_per_rank']} "
                          f"sockets per rank, {r['requests']} store requests", file=sys.stderr, flush=True)
    finally:
        if a.port_range:
            with open(range_file, "w") as f:
                f.write(" ".join(a.old_range))
        shutil.rmtree(workdir, ignore_errors=True)
    if a.store == "both":
        print_comparison(rows, a)
    else:
        print_scaling(rows, a)


if __name__ == "__main__":
    main()
