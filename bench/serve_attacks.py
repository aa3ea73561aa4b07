#!/usr/bin/env python3
"""Slow and greedy clients against `gradmesh serve`, on loopback.

Holds 16 connections that send one header line every 2 s, 20 that send a
declared 50 MB body at 1 KB per 2 s, and 200 half-sent requests, then times
20 health probes and 20 JSON inference requests while they hold; sends 11
pipelined requests in one write and counts the answers; then SIGTERM, and
the time to exit.

With --open-loop RATE, instead: JSON inference offered at RATE requests/s
and health probes at 100/s (gradmesh bench http, open loop), first on a
quiet server, then with 1,000 idle connections and 100 that send one header
line every 2 s held open (--max-connections 2048 so that they all fit);
prints each run's inference rate answered and both p99s.

usage: bench/serve_attacks.py GRADMESH RUN_DIR [--open-loop RATE]
       (RUN_DIR: a trained classifier run, e.g. from
        gradmesh train examples/mlp.toml --set data.limit_train=384)
"""
import json, socket, subprocess, sys, threading, time, re, signal

g, run = sys.argv[1], sys.argv[2]
open_loop_rate = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--open-loop" else None
proc = subprocess.Popen([g, "serve", "m=" + run, "--port", "0", "--header-timeout", "10", "--max-connections", "2048",
                         "--max-batch", "32", "--max-delay-us", "500"], stderr=subprocess.PIPE, text=True)
port = None
for line in proc.stderr:
    m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    if m:
        port = int(m.group(1)); break
threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
body = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": [0.1] * 784}]})

def request(raw, timeout=60):
    t = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(raw.encode())
    data = b""
    while b"\r\n\r\n" not in data or (b"Content-Length" in data and len(data.split(b"\r\n\r\n", 1)[1]) < int(re.search(rb"Content-Length: (\d+)", data).group(1))):
        chunk = s.recv(65536)
        if not chunk: break
        data += chunk
    s.close()
    return time.time() - t, data.split(b"\r\n", 1)[0].decode()

def health():
    return request("GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")

def infer():
    return request(f"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}")

stop = threading.Event()
def slow_header(reopen=False):
    """One header line every 2 s until `stop`; when the server's header deadline closes the connection,
    give up, or (reopen) open another as an attacker would."""
    def begin():
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"GET /v2/health/ready HTTP/1.1\r\n")
        return c
    s, i = begin(), 0
    while not stop.is_set():
        try: s.sendall(f"X-{i}: y\r\n".encode())
        except OSError:
            if not reopen: return
            s = begin()
        i += 1; stop.wait(2)
def slow_body():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 50000000\r\n\r\n")
    while not stop.is_set():
        try: s.sendall(b"a" * 1024)
        except OSError: return
        time.sleep(2)

def open_loop_run(label):
    """Inference at open_loop_rate and health at 100/s together, 5 s each after 1 s of warm-up."""
    with open("/tmp/gradmesh-attack-body.json", "w") as f:
        f.write(body)
    common = ["--connections", "64", "--seconds", "5", "--warmup", "1", "--json"]
    inf = subprocess.Popen([g, "bench", "http", f"http://127.0.0.1:{port}/v2/models/m/infer", "--rate",
                            str(open_loop_rate), "--body-file", "/tmp/gradmesh-attack-body.json", "--header",
                            "Content-Type: application/json"] + common, stdout=subprocess.PIPE, text=True)
    hl = subprocess.Popen([g, "bench", "http", f"http://127.0.0.1:{port}/v2/health/ready", "--rate", "100"] + common,
                          stdout=subprocess.PIPE, text=True)
    i, h = json.loads(inf.communicate()[0]), json.loads(hl.communicate()[0])
    print(f"  {label}: inference offered {open_loop_rate}/s, answered {i['achieved_rate']:.0f}/s, p50 {i['p50_ms']:.2f} ms, "
          f"p99 {i['p99_ms']:.2f} ms, non-2xx {i['non_2xx']}, unanswered {i['unanswered']}; health p99 {h['p99_ms']:.2f} ms, "
          f"max {h['max_ms']:.2f} ms, non-2xx {h['non_2xx']}", flush=True)
    return i, h


if open_loop_rate:
    clean, _ = open_loop_run("quiet server")
    held = []
    for _ in range(1000):
        held.append(socket.create_connection(("127.0.0.1", port)))
    for _ in range(100):
        threading.Thread(target=slow_header, args=(True,), daemon=True).start()
    time.sleep(2)
    attacked, _ = open_loop_run("1,000 idle + 100 trickling connections")
    print(f"  inference answered under attack / quiet: {attacked['achieved_rate'] / clean['achieved_rate']:.2f}")
    stop.set()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    sys.exit(0)

idle = []
threads = [threading.Thread(target=slow_header, daemon=True) for _ in range(16)] + \
          [threading.Thread(target=slow_body, daemon=True) for _ in range(20)]
for t in threads: t.start()
for _ in range(200):
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost"); idle.append(s)
time.sleep(3)
print("with 16 slow-header, 20 slow-body (50 MB declared, 1 KB per 2 s) and 200 half-sent connections open:")
for name, f in (("health", health), ("infer", infer)):
    times = [f() for _ in range(20)]
    print(f"  {name}: statuses {sorted(set(s for _, s in times))}, max {max(t for t, _ in times)*1000:.1f} ms, median {sorted(t for t, _ in times)[10]*1000:.1f} ms")
# pipelining: 10 mixed requests in one write
reqs = "".join(["GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n", f"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}"] * 5)
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall(reqs.encode() + b"GET /v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
data = b""
while True:
    c = s.recv(65536)
    if not c: break
    data += c
print(f"11 pipelined requests (10 mixed + 1 closing): {data.count(b'HTTP/1.1 200')} answered 200, {data.count(b'HTTP/1.1 4')} 4xx")
stop.set()
proc.send_signal(signal.SIGTERM)
t = time.time(); rc = proc.wait(timeout=60)
print(f"SIGTERM with 200 idle and 36 slow connections open: exit {rc} after {time.time() - t:.2f} s")
