#!/usr/bin/env python3
"""The multi-node control plane under faults: does the job finish, what does
each fault cost, and are the final weights still bit-identical?

Each run: N launchers as N nodes on loopback (`gradmesh launch --nnodes N
--nproc-per-node K --max-restarts 3 --heartbeat-timeout 3`, gloo backend),
training examples/mlp.toml (hidden [256, 256], 38400 training samples, 1
thread a worker, checkpoint every 50 steps, --resume auto) through a fresh
store. Once checkpoint step-F exists (F chosen from the first anchor's
step rate: ~5 s into training) and step F + 20 has been logged, one fault
is injected:

  redis-conn    every Redis client connection killed (CLIENT KILL TYPE normal)
  redis-restart Redis shut down without saving and started again on its port,
                empty (--save "" --appendonly no)
  etcd-member   one member of a 3-member loopback etcd cluster SIGKILLed and
                started again on its data dir 1 s later (--etcd-victim: the
                first member of the endpoint list, which every client asks
                first, or the leader)
  worker-kill   node 1's worker SIGKILLed
  worker-stop   node 1's worker SIGSTOPped (found by hang detection)
  node-kill     node 1's launcher and worker SIGKILLed, the launcher started
                again 1 s later with the same --node-rank
  node-kill-auto  the same with automatic node ranks (no --node-rank anywhere;
                the victim is whichever launcher got node rank 1)

Measured per run, from runs/ID/metrics.jsonl (rank 0 appends; every
generation's rank 0 appends to the same file; every line has "time", Unix
seconds with ms, while a step line's "wall_time" restarts with each
process, so only "time" is used):
  finished        every launcher exited 0 (the SIGKILLed launcher aside)
  restarts        {"type":"restart"} lines; steps lost: their steps_lost summed
  to first step   the restart line's seconds_to_first_step (from the moment a
                  launcher SAW the failure to the first step trained again)
  fault -> first step after resume   measured here, with a restart: the
                  fault's wall clock to the "time" of the first step line after
                  the restart line (a step beyond the resumed one; steps are
                  logged every 10)
  stall           measured here, every run: the longest gap between
                  consecutive step lines whose span touches [fault, fault +
                  10 s], less the run's median gap: the training time the
                  fault cost (it differs from the above when training went
                  on after the fault and the restart came later). The
                  anchors' same statistic over the same steps is the noise
                  floor.
  bit-identical   sha256 of runs/ID/model.safetensors equals the anchor's
  steps re-trained  the highest step logged before a restart line less the
                  step it resumed at (steps_lost, from heartbeats the launcher
                  read, can be lower)
  phases          where the first restart's time went: see phases()
Anchors: uninterrupted runs of the same config, on Redis and on etcd, in the
same session; runs alternate kind after kind, --repeats times; medians and
min-max. Every run's store, stamped launcher logs (wall clock on arrival),
run directory and run.json stay in --workdir; --reanalyse WORKDIR prints the
tables again from them.

usage: bench/multi_node_faults.py [--gradmesh PATH] [--kinds a,b,...] [--repeats 3] [--epochs 12]
                                  [--nnodes 2] [--nproc-per-node 1] [--fault-step F] [--etcd-victim first|leader]
                                  [--workdir DIR] | --reanalyse WORKDIR
"""
import argparse, glob, hashlib, json, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time
import threading, urllib.request

from control_plane import descendants  # the same /proc walk

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "examples", "mlp.toml")
ETCD = "/usr/bin/etcd"
KINDS = ["redis-conn", "redis-restart", "etcd-member", "worker-kill", "worker-stop", "node-kill", "node-kill-auto"]
CKPT_EVERY = 50
HEARTBEAT_TIMEOUT = 3
RUN_LIMIT_S = 240  # a run still going after this is stopped and counted as not finished
STALL_WINDOW_S = 10.0
FAULT_AFTER_STEPS = 20  # the fault comes when step F + 20 is logged (every 10 steps), after checkpoint step-F


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_quietly(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class Redis:
    def __init__(self, workdir):
        self.port, self.workdir, self.proc = free_port(), workdir, None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", self.workdir],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if "PONG" in self.cli("ping"):
                return
            time.sleep(0.01)
        raise RuntimeError(f"redis-server on port {self.port} did not answer")

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True).stdout

    def endpoint(self):
        return f"redis://127.0.0.1:{self.port}"

    def restart_empty(self):
        self.cli("shutdown", "nosave")
        self.proc.wait(timeout=10)
        self.start()

    def close(self):
        self.proc.terminate()
        self.proc.wait()


class EtcdCluster:
    """3 members on loopback with tests/comm/etcd_cluster.h's flags (heartbeat 50 ms, election 500 ms)."""

    def __init__(self, workdir, size=3):
        self.dir = tempfile.mkdtemp(prefix="etcd_", dir=workdir)
        for attempt in range(3):
            self.ports = [free_port() for _ in range(size)]
            self.peers = [f"http://127.0.0.1:{free_port()}" for _ in range(size)]
            self.token, self.procs = f"mnf-{os.getpid()}-{attempt}", [None] * size
            for i in range(size):
                self.start(i, "new", attempt)
            if all(self.healthy(i, 20) for i in range(size)):
                self.attempt = attempt
                return
            self.close()
        raise RuntimeError(f"the etcd cluster did not become healthy; member logs in {self.dir}")

    def start(self, i, state, attempt=None):
        attempt = self.attempt if attempt is None else attempt
        client, data = f"http://127.0.0.1:{self.ports[i]}", os.path.join(self.dir, f"{attempt}-m{i}")
        cluster = ",".join(f"m{j}={u}" for j, u in enumerate(self.peers))
        with open(data + ".log", "a") as log:
            self.procs[i] = subprocess.Popen(
                [ETCD, "--name", f"m{i}", "--data-dir", data, "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", self.peers[i],
                 "--initial-advertise-peer-urls", self.peers[i], "--initial-cluster", cluster,
                 "--initial-cluster-state", state, "--initial-cluster-token", self.token,
                 "--heartbeat-interval", "50", "--election-timeout", "500"], stdout=log, stderr=subprocess.STDOUT)

    def healthy(self, i, limit_s):
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and self.procs[i].poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[i]}/health", timeout=2) as r:
                    if '"true"' in r.read().decode():
                        return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def leader(self):
        """Index of the leader member, from member 0's status (-1: unknown)."""
        try:
            status = []
            for p in self.ports:
                req = urllib.request.Request(f"http://127.0.0.1:{p}/v3/maintenance/status", b"{}",
                                             {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=2) as r:
                    status.append(json.loads(r.read()))
            return next(i for i, s in enumerate(status) if s["header"]["member_id"] == s["leader"])
        except (OSError, KeyError, StopIteration, ValueError):
            return -1

    def endpoint(self):
        return "etcd://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def close(self):
        for p in self.procs:
            if p and p.poll() is None:
                p.terminate()
        for p in self.procs:
            if p:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for data in glob.glob(os.path.join(self.dir, "*-m*")):
            if os.path.isdir(data):  # ~80 MB a member (a preallocated WAL); the member logs stay
                shutil.rmtree(data, ignore_errors=True)


def train_args(a, out_dir, run_id):
    sets = ["train.threads=1", f"output.dir={out_dir}", f"model.hidden=[256,256]", "data.limit_train=38400",
            "data.limit_test=1000", "train.log_every=10", "output.report=false", "output.trace_steps=0",
            f"checkpoint.every_steps={CKPT_EVERY}", "checkpoint.keep_last=0", f"train.epochs={a.epochs}",
            "parallel.backend=gloo", f"output.run_id={run_id}"]
    return [a.gradmesh, "train", MLP] + [x for s in sets for x in ("--set", s)] + ["--resume", "auto"]


def launch_args(a, endpoint, run_id, node_rank):
    rank = [] if node_rank is None else ["--node-rank", str(node_rank)]
    return [a.gradmesh, "launch", "--nnodes", str(a.nnodes), "--nproc-per-node", str(a.nproc_per_node),
            "--max-restarts", "3", "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT), "--rdzv-endpoint", endpoint,
            "--rdzv-id", run_id, "--dashboard", "off", *rank, "--"]


ENV = dict(os.environ, GRADMESH_PROGRESS="lines", GRADMESH_HEARTBEAT_INTERVAL="0.1")
NODE_LINE = re.compile(r"launch: run '[^']*' generation \d+, node (\d+) of")


class Launcher:
    def __init__(self, a, endpoint, run_id, node_rank, out_dir, log_name):
        self.cmd = launch_args(a, endpoint, run_id, node_rank) + train_args(a, out_dir, run_id)
        self.log_path = log_name
        self.log = open(log_name, "a")
        self.lines = []  # (time.time() on arrival, line): the launcher's messages on a wall clock
        self.proc = subprocess.Popen(self.cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=out_dir,
                                     text=True, errors="replace")
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()
        self.killed = False

    def _pump(self):
        for line in self.proc.stdout:
            now = time.time()
            self.lines.append((now, line))
            self.log.write(f"{now:.3f} {line}")

    def close(self):
        self.reader.join(timeout=10)
        self.log.close()

    def node_rank(self):
        m = [NODE_LINE.search(line) for _, line in list(self.lines)]
        m = [x for x in m if x]
        return int(m[0].group(1)) if m else None

    def worker(self):
        for pid in descendants(self.proc.pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"\0train\0" in f.read():
                        return pid
            except OSError:
                pass
        return None


def newest_checkpoint(run_dir):
    steps = [int(os.path.basename(p)[5:]) for p in glob.glob(os.path.join(run_dir, "checkpoints", "step-*"))
             if os.path.basename(p)[5:].isdigit()]
    return max(steps, default=-1)


def read_metrics(run_dir):
    out = []
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by a SIGKILL
    except FileNotFoundError:
        pass
    return out


def stall(lines, t_fault):
    """Longest gap between consecutive step lines that touches [t_fault, t_fault + window], less the median gap."""
    times = sorted(j["time"] for j in lines if j["type"] == "step")
    gaps = [(t0, t1) for t0, t1 in zip(times, times[1:])]
    if not gaps:
        return None
    median = statistics.median(t1 - t0 for t0, t1 in gaps)
    near = [t1 - t0 for t0, t1 in gaps if t1 >= t_fault and t0 <= t_fault + STALL_WINDOW_S]
    return max(near) - median if near else None


def launcher_lines(out_dir):
    """Every launcher's output as (wall clock on arrival, line), from the logs run_once stamped."""
    out = []
    for path in glob.glob(os.path.join(out_dir, "launcher*.log*")):
        with open(path, errors="replace") as f:
            for line in f:
                stamp, _, text = line.partition(" ")
                try:
                    out.append((float(stamp), text))
                except ValueError:
                    pass
    return sorted(out)


def analyse(out_dir):
    """A run's row, from what it left in out_dir: run.json (written by run_once), the launchers' stamped logs,
    runs/ID/metrics.jsonl and the final weights. Runs again on a finished workdir with --reanalyse."""
    with open(os.path.join(out_dir, "run.json")) as f:
        r = json.load(f)
    run_dir, t_fault = os.path.join(out_dir, r["run_id"]), r["t_fault"]
    lines = read_metrics(run_dir)
    restarts = [i for i, j in enumerate(lines) if j["type"] == "restart"]
    r.update(restarts=len(restarts), steps_lost=sum(lines[i].get("steps_lost", 0) for i in restarts),
             causes=[lines[i].get("cause") for i in restarts], to_first_step=None, fault_to_train=None, stall=None,
             steps_retrained=None, phases=None)
    live = [c for c, killed in zip(r["codes"], r["killed"]) if not killed]
    r["finished"] = all(c == 0 for c in live)
    if t_fault is not None:
        r["stall"] = stall(lines, t_fault)
        # Steps trained before a restart and again after it: the highest step logged before the restart line
        # (every 10 steps, so up to 9 fewer than were trained) less the step resumed at.
        retrained, prev = 0, 0
        for i in restarts:
            before = [j["step"] for j in lines[prev:i] if j["type"] == "step"]
            retrained += max(0, max(before, default=0) - lines[i]["resumed_at_step"])
            prev = i
        r["steps_retrained"] = retrained if restarts else 0
        if restarts:
            i = restarts[0]
            first = lines[i]
            r["to_first_step"] = first["seconds_to_first_step"]
            after = next((j for j in lines[i + 1:] if j["type"] == "step" and j["step"] > first["resumed_at_step"]),
                         None)
            if after:
                r["fault_to_train"] = after["time"] - t_fault
            r["phases"] = phases(lines, i, launcher_lines(out_dir), t_fault)
    try:
        with open(os.path.join(run_dir, "model.safetensors"), "rb") as f:
            r["sha256"] = hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        r["sha256"] = None
    if r["kind"].startswith("anchor"):
        r["steps"] = sorted((j["time"], j["step"]) for j in lines if j["type"] == "step")
        r["train_s"] = r["steps"][-1][0] - r["steps"][0][0] if r["steps"] else None
    return r


RESTARTING = re.compile(r"\(restart \d+ of \d+\)")
PHASES = ["detect", "stop", "rendezvous", "start", "first_step", "logged"]


def phases(lines, i, stamped, t_fault):
    """Where the time to the restart line lines[i] went, each phase ending at a wall-clock mark (seconds):
    detect      the fault -> a launcher saw the failure (the record's failure_unix_ms)
    stop        -> the first launcher's "(restart k of N)" line: its workers stopped, restart claimed
    rendezvous  -> the last launcher's "generation g, node" line: every node noticed, stopped its workers and
                   joined generation g
    start       -> the "resume" line of generation g: processes started, data loaded, checkpoint read
    first_step  -> the restart line (written at the first step trained again)
    logged      -> the first step line after it (steps are logged every 10)"""
    first = lines[i]
    g = first["generation"]
    seen = first["time"] - first["seconds_to_first_step"]
    after = [(t, line) for t, line in stamped if t > t_fault]
    restarting = min((t for t, line in after if RESTARTING.search(line)), default=None)
    joined = max((t for t, line in after if f"generation {g}, node " in line), default=None)
    resume = next((j["time"] for j in lines if j["type"] == "resume" and j.get("generation") == g), None)
    logged = next((j["time"] for j in lines[i + 1:] if j["type"] == "step"), None)
    marks = [t_fault, seen, restarting, joined, resume, first["time"], logged]
    if None in marks:
        return None
    return {name: t1 - t0 for name, t0, t1 in zip(PHASES, marks, marks[1:])}


class StepWatch:
    """True once runs/ID/metrics.jsonl has a step line at or beyond `step` (read incrementally)."""

    def __init__(self, run_dir, step):
        self.path, self.step, self.offset, self.partial = os.path.join(run_dir, "metrics.jsonl"), step, 0, ""

    def __call__(self):
        try:
            with open(self.path) as f:
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return False
        *complete, self.partial = (self.partial + chunk).split("\n")
        for line in complete:
            if '"type":"step"' in line:
                try:
                    if json.loads(line)["step"] >= self.step:
                        return True
                except (ValueError, KeyError):
                    pass
        return False


def wait_for(cond, limit_s):
    deadline = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def run_once(a, kind, run_id, workdir):
    """One run of `kind` ("anchor-redis", "anchor-etcd" or a fault kind); returns its measurements."""
    out_dir = os.path.join(workdir, run_id)
    os.makedirs(out_dir)
    run_dir = os.path.join(out_dir, run_id)
    store = EtcdCluster(out_dir) if kind in ("etcd-member", "anchor-etcd") else Redis(out_dir)
    auto = kind == "node-kill-auto"
    launchers, t_fault, note = [], None, ""
    try:
        endpoint = store.endpoint()
        for n in range(a.nnodes):
            launchers.append(Launcher(a, endpoint, run_id, None if auto else n, out_dir,
                                      os.path.join(out_dir, f"launcher{n}.log")))
        reached = kind.startswith("anchor") or wait_for(lambda: newest_checkpoint(run_dir) >= a.fault_step, 120)
        if not reached:
            note = f"no checkpoint step-{a.fault_step} within 120 s: no fault injected"
        elif not kind.startswith("anchor") and not wait_for(StepWatch(run_dir, a.fault_step + FAULT_AFTER_STEPS), 60):
            note = f"no step line >= {a.fault_step + FAULT_AFTER_STEPS} within 60 s: no fault injected"
        elif not kind.startswith("anchor"):
            victim = next((l for l in launchers if l.node_rank() == 1), launchers[-1])
            if kind == "redis-conn":
                t_fault = time.time()
                note = store.cli("client", "kill", "type", "normal").strip() + " connections killed"
            elif kind == "redis-restart":
                t_fault = time.time()
                store.restart_empty()
                note = f"Redis back after {time.time() - t_fault:.2f} s"
            elif kind == "etcd-member":
                leader = store.leader()
                i = leader if a.etcd_victim == "leader" and leader >= 0 else 0
                t_fault = time.time()
                store.procs[i].kill()
                store.procs[i].wait()
                time.sleep(1.0)
                store.start(i, "existing")
                note = f"member {i} killed ({'the leader' if i == leader else f'leader was member {leader}'})"
            elif kind in ("worker-kill", "worker-stop"):
                pid = victim.worker()
                t_fault = time.time()
                os.kill(pid, signal.SIGKILL if kind == "worker-kill" else signal.SIGSTOP)
            elif kind in ("node-kill", "node-kill-auto"):
                pids = [victim.proc.pid] + descendants(victim.proc.pid)
                t_fault = time.time()
                for pid in pids:
                    kill_quietly(pid)
                victim.killed = True
                victim.proc.wait()
                time.sleep(1.0)
                node = None if auto else launchers.index(victim)
                launchers.append(Launcher(a, endpoint, run_id, node, out_dir, victim.log_path + ".again"))
        deadline = time.monotonic() + RUN_LIMIT_S
        codes = []
        for l in launchers:
            try:
                codes.append(l.proc.wait(timeout=max(1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
    finally:
        for l in launchers:
            for pid in descendants(l.proc.pid) + [l.proc.pid]:
                kill_quietly(pid, signal.SIGCONT)
                kill_quietly(pid)
            l.proc.wait()
            l.close()
        store.close()
    with open(os.path.join(out_dir, "run.json"), "w") as f:
        json.dump({"kind": kind, "run_id": run_id, "codes": codes, "killed": [l.killed for l in launchers],
                   "t_fault": t_fault, "note": note, "dir": out_dir}, f)
    shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)  # ~150 MB a run (keep_last = 0)
    return analyse(out_dir)


def anchor_floor(anchor, a):
    """The stall statistic of an uninterrupted run over the same window: its 'fault' at the step a fault hits."""
    at = a.fault_step + FAULT_AFTER_STEPS
    t = next((t for t, s in anchor["steps"] if s >= at), None)
    return stall([{"type": "step", "time": t_} for t_, _ in anchor["steps"]], t) if t else None


def machine_line():
    lscpu = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
    field = lambda name: next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith(name)), "?")
    flags = [f for f in field("Flags:").split() if f in ("avx2", "avx512f", "avx512_bf16") or f.startswith("amx")]
    return f"{field('Model name:')}, {os.cpu_count()} cores ({' '.join(flags) or 'no avx2'})"


def version(cmd):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    return out.splitlines()[0].strip() if out else "?"


def spread(values, digits=2, unit=" s"):
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}f}{unit}"
    return f"{med:.{digits}f}{unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def print_table(a, anchors, rows):
    hashes = {r["sha256"] for r in anchors}
    ref = anchors[0]["sha256"]
    floor = [anchor_floor(r, a) for r in anchors]
    print(f"\nload average (1, 5, 15 min) {a.load_start} at the start, {a.load_end} at the end "
          f"({os.cpu_count()} CPUs; other work on the machine shows here)")
    print(f"CPU: {machine_line()}; {version(['redis-server', '--version'])}; {version([ETCD, '--version'])} "
          f"(3 members on loopback, heartbeat 50 ms, election 500 ms)")
    print(f"config: {a.nnodes} nodes x {a.nproc_per_node} worker on loopback, gloo; examples/mlp.toml with hidden "
          f"[256,256], 38400 samples, {a.epochs} epochs ({a.steps_total} steps), 1 thread a worker, checkpoint every "
          f"{CKPT_EVERY} steps; --max-restarts 3 --heartbeat-timeout {HEARTBEAT_TIMEOUT}, "
          f"GRADMESH_HEARTBEAT_INTERVAL=0.1; fault when checkpoint step-{a.fault_step} has appeared and step "
          f"{a.fault_step + FAULT_AFTER_STEPS} is logged; {a.repeats} runs a kind, median (min-max)")
    print(f"anchors (uninterrupted): {len(anchors)} runs, training {spread([r['train_s'] for r in anchors])}, "
          f"exit codes {[r['codes'] for r in anchors]}, weights {'all identical' if len(hashes) == 1 else 'DIFFER'} "
          f"(sha256 {ref[:16]}...); their stall statistic over the same window (noise floor): {spread(floor)}\n")
    print("| fault | finished | restarts | steps lost (restart line) | steps re-trained (step lines) "
          "| seconds_to_first_step (restart line) | fault -> first step after resume "
          "| stall (longest step gap - median) | bit-identical |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in a.kinds:
        rs = [r for r in rows if r["kind"] == kind]
        same = sum(r["sha256"] == ref for r in rs)
        label = kind
        if kind == "etcd-member":  # whether the member killed led the cluster matters: say how often it did
            led = sum("(the leader)" in r["note"] for r in rs)
            label = f"etcd-member ({'the leader' if a.etcd_victim == 'leader' else 'the first member'}; it led in {led}/{len(rs)})"
        print(f"| {label} | {sum(r['finished'] for r in rs)}/{len(rs)} | {spread([r['restarts'] for r in rs], 0, '')} "
              f"| {spread([r['steps_lost'] for r in rs], 0, '')} | {spread([r['steps_retrained'] for r in rs], 0, '')} "
              f"| {spread([r['to_first_step'] for r in rs])} "
              f"| {spread([r['fault_to_train'] for r in rs])} | {spread([r['stall'] for r in rs])} "
              f"| {'yes' if same == len(rs) else f'NO ({same}/{len(rs)})'} |")
    print("\nWhere the time to train again goes (first restart of each run; median seconds; phases as in phases()):\n")
    print("| fault | detect | stop workers, claim restart | rendezvous | start, load, resume | to first step "
          "| to first logged step | sum |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in a.kinds:
        ps = [r["phases"] for r in rows if r["kind"] == kind and r["phases"]]
        if ps:
            med = [statistics.median(p[name] for p in ps) for name in PHASES]
            print(f"| {kind} | " + " | ".join(f"{m:.2f}" for m in med) + f" | {sum(med):.2f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gradmesh", default=os.path.join(ROOT, "build", "gradmesh"),
                   help="the gradmesh binary (default build/gradmesh; copy it elsewhere to measure while build/ changes)")
    p.add_argument("--kinds", default=",".join(KINDS), help="fault kinds, comma-separated (default all)")
    p.add_argument("--repeats", type=int, default=3, help="runs per fault kind (default 3)")
    p.add_argument("--epochs", type=int, default=12, help="train.epochs (default 12: 3600 steps)")
    p.add_argument("--nnodes", type=int, default=2)
    p.add_argument("--nproc-per-node", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=0,
                   help="inject after checkpoint step-F appears (default: ~5 s into training at the anchor's rate)")
    p.add_argument("--etcd-victim", default="first", choices=["first", "leader"],
                   help="the etcd member killed: the first of the endpoint list (default) or the leader")
    p.add_argument("--workdir", default="", help="keep every run's store, logs and run directory here")
    p.add_argument("--reanalyse", default="", metavar="WORKDIR",
                   help="print the tables again from a finished --workdir, without running anything")
    a = p.parse_args()
    if a.reanalyse:
        with open(os.path.join(a.reanalyse, "setup.json")) as f:
            a = argparse.Namespace(**json.load(f))
        runs = [analyse(os.path.dirname(path)) for path in sorted(glob.glob(os.path.join(a.workdir, "*", "run.json")))]
        anchors = sorted((r for r in runs if r["kind"].startswith("anchor")), key=lambda r: r["run_id"] != "anchor-redis")
        print_table(a, anchors, [r for r in runs if not r["kind"].startswith("anchor")])
        return
    a.gradmesh = os.path.abspath(a.gradmesh)
    a.kinds = a.kinds.split(",")
    a.steps_total = a.epochs * (38400 // 128)
    for k in a.kinds:
        if k not in KINDS:
            sys.exit(f"unknown fault kind {k!r}; kinds: {', '.join(KINDS)}")
    for tool in ("redis-server", "redis-cli", ETCD):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found (Debian packages redis-server, etcd-server)")
    if not os.access(a.gradmesh, os.X_OK):
        sys.exit(f"{a.gradmesh} not built (cmake --build build --target gradmesh)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    workdir = os.path.abspath(a.workdir) if a.workdir else tempfile.mkdtemp(prefix="gm_mnf_")
    os.makedirs(workdir, exist_ok=True)
    print(f"runs in {workdir}", file=sys.stderr)
    a.load_start = " ".join(f"{x:.1f}" for x in os.getloadavg())

    def report(r):
        print(f"  {r['kind']}: exit {r['codes']}, restarts {r['restarts']} {r['causes']}, steps lost "
              f"{r['steps_lost']}, to_first_step {r['to_first_step']}, fault->train {r['fault_to_train']}, "
              f"stall {r['stall']}, sha {str(r['sha256'])[:12]} {r['note']}", file=sys.stderr, flush=True)
        if r.get("phases"):
            print("    phases: " + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items()), file=sys.stderr)

    anchors = [run_once(a, "anchor-redis", "anchor-redis", workdir)]
    report(anchors[0])
    rate = len(anchors[0]["steps"]) and (anchors[0]["steps"][-1][1] - anchors[0]["steps"][0][1]) / anchors[0]["train_s"]
    print(f"  anchor: {rate:.0f} steps/s, {anchors[0]['train_s']:.1f} s of training", file=sys.stderr)
    a.fault_step = a.fault_step or max(CKPT_EVERY, round(5.0 * rate / CKPT_EVERY) * CKPT_EVERY)
    rows = []
    for rep in range(a.repeats):
        if rep == 1:
            anchors.append(run_once(a, "anchor-etcd", "anchor-etcd", workdir))
            report(anchors[-1])
        for kind in a.kinds:
            rows.append(run_once(a, kind, f"{kind}-{rep}", workdir))
            report(rows[-1])
    anchors.append(run_once(a, "anchor-redis", "anchor-redis-end", workdir))
    report(anchors[-1])
    a.load_end = " ".join(f"{x:.1f}" for x in os.getloadavg())
    a.workdir = workdir
    with open(os.path.join(workdir, "setup.json"), "w") as f:
        json.dump(vars(a), f, indent=1)
    print_table(a, anchors, rows)


if __name__ == "__main__":
    main()
