#!/usr/bin/env python3
"""Serving throughput and latency: gradmesh serve against the quick PyTorch
deployment people write, on this machine.

Sides, all on this 2-core machine, answering the same Open Inference
Protocol JSON request (one 28x28 image, FP32) for the same MLP weights
(the reference MLP, 784-512-512-10, trained briefly: its accuracy does not
matter here):
  - gradmesh serve with dynamic batching (--max-batch 32, --max-delay-us 500,
    one compute thread);
  - the same with the binary tensor data extension (the pixels as raw FP32
    after the JSON header: no number parsing);
  - gradmesh serve with batching off (--max-batch 1);
  - the anchor: PyTorch (torch.set_num_threads(1)) behind Python's
    ThreadingHTTPServer, batch 1 (bench/serve_torch_anchor.py).
Load: `gradmesh bench http`, an open-loop generator: requests at a fixed
offered rate over 64 keep-alive connections, each latency counted from
when the request was due, so a server that falls behind shows its queue;
offered rates step up until a side saturates; 5 s per point after a 1 s
warm-up; the generator shares the cores with the server. Reported: each
side's highest answered rate with p99 <= 10 ms and nothing refused or lost.
(The HTTP-layer part still uses wrk, closed loop, as its earlier figures did.)

Generation: examples/gpt.toml (0.8 M parameters) and a wider GPT (n_embd
384: 7.2 M), each trained 60 steps on the fortunes; 8 sequences of 64 tokens
each, one at a time against all 8 at once (continuous batching), tokens/s
over the whole run, and the time to the first token of a streamed request.

Sharded serving (--part sharded): the wide GPT in one process, in two
pipeline stages (--mesh pp=2) and in two tensor shards (--mesh tp=2), each
process with one compute thread: wrk on /infer with one 32-token row per
request (batching up to 8, two batches in flight so the stages overlap),
and the generation figures above.

usage: bench/serve.py [--gradmesh build/gradmesh] [--seconds 5] [--part all|infer|generate|sharded]
"""
import argparse, json, os, re, signal, struct, subprocess, sys, tempfile, threading, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONNECTIONS = [1, 2, 4, 8, 16, 32, 64]


def start(cmd, log_path, pattern, cwd=None):
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)
    for _ in range(600):
        time.sleep(0.1)
        text = open(log_path).read()
        m = re.search(pattern, text)
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            sys.exit(f"{cmd[0]} exited: {text}")
    sys.exit(f"{cmd} did not start: {open(log_path).read()}")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def wrk(port, path, body_file, connections, seconds, header_length=None):
    """body_file None: GET."""
    lua = (body_file or os.path.join(tempfile.gettempdir(), f"gradmesh-bench-get-{os.getpid()}")) + ".lua"
    with open(lua, "w") as f:
        if body_file is None:
            f.write('wrk.method = "GET"\n')
        else:
            f.write('wrk.method = "POST"\n')
            if header_length is None:
                f.write('wrk.headers["Content-Type"] = "application/json"\n')
            else:
                f.write('wrk.headers["Content-Type"] = "application/octet-stream"\n'
                        f'wrk.headers["Inference-Header-Content-Length"] = "{header_length}"\n')
            f.write(f'local f = io.open("{body_file}", "rb")\nwrk.body = f:read("*a")\nf:close()\n')
    url = f"http://127.0.0.1:{port}{path}"
    subprocess.run(["wrk", "-t1", f"-c{connections}", "-d1s", "-s", lua, url], capture_output=True)  # warm-up
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", lua, url],
                         capture_output=True, text=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)

    def pct(p):
        m = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", out)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value

    return rate, pct(50), pct(99), int(errors.group(1)) if errors else 0


OFFERED = [250, 500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 10000, 12000, 13000, 14000, 16000, 18000, 20000]


def sweep(name, g, port, path, body_file, headers, seconds, rates, best):
    """Offers `rates` in turn until p99 passes 10 ms, then halves the gap between the last rate that held and
    the first that did not three times, so that a side's figure is not set by where the steps fall. Prints a
    row per point; best[name] is the highest answered rate with p99 <= 10 ms, nothing refused or lost."""
    def point(rate):
        r = open_loop(g, port, path, body_file, headers, rate, seconds)
        p99 = r["p99_ms"] if r["p99_ms"] is not None else float("inf")
        print(f"| {name} | {rate} | {r['achieved_rate']:.0f} | {r['p50_ms']:.2f} | {p99:.2f} | "
              f"{r['non_2xx']} | {r['unanswered']} |", flush=True)
        ok = p99 <= 10 and r["non_2xx"] == 0 and r["unanswered"] == 0
        if ok:
            best[name] = max(best.get(name, 0), r["achieved_rate"])
        return ok

    good, bad = 0, None
    for rate in rates:
        if point(rate):
            good = rate
        else:
            bad = rate
            break  # past the knee: higher offers only lengthen the queue
    for _ in range(3 if bad else 0):
        mid = (good + bad) // 2
        if point(mid):
            good = mid
        else:
            bad = mid


def cpu_line():
    model, flags = "?", set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and model == "?":
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
    wanted = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"CPU: {model}, {os.cpu_count()} cores ({' '.join(wanted)}); server and load generator share them"


def open_loop(g, port, path, body_file, headers, rate, seconds):
    """One point of gradmesh bench http: requests at `rate` per second whatever the server does."""
    cmd = [g, "bench", "http", f"http://127.0.0.1:{port}{path}", "--rate", str(rate), "--connections", "64",
           "--seconds", str(seconds), "--warmup", "1", "--json"]
    if body_file:
        cmd += ["--body-file", body_file]
    for h in headers:
        cmd += ["--header", h]
    out = subprocess.run(cmd, capture_output=True, text=True)
    return json.loads(out.stdout)


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gradmesh", default=os.path.join(ROOT, "build", "gradmesh"))
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--part", choices=["all", "infer", "batching", "http", "generate", "sharded"], default="all")
    args = ap.parse_args()
    g = args.gradmesh
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([g, "train", os.path.join(ROOT, "examples", "mlp.toml"), "--set", "output.run_id=mlp",
                        "--set", "data.limit_train=2048", "--set", "output.report=false"],
                       cwd=tmp, check=True, capture_output=True)
        pixels = [((i * 37) % 255) / 255.0 for i in range(784)]
        body = os.path.join(tmp, "image.json")
        with open(body, "w") as f:
            json.dump({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32", "data": pixels}]}, f)
        # The same request with the binary tensor data extension: the pixels raw after the JSON.
        binary_body = os.path.join(tmp, "image.bin")
        header = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                         "parameters": {"binary_data_size": 784 * 4}}]}).encode()
        with open(binary_body, "wb") as f:
            f.write(header + struct.pack("<784f", *pixels))
        sides = [
            ("gradmesh serve, dynamic batching", [g, "serve", "mlp=" + os.path.join(tmp, "runs", "mlp"), "--port", "0",
                                                  "--max-batch", "32", "--max-delay-us", "500", "--http-threads", "80"]),
            ("gradmesh serve, dynamic batching, binary tensors", [g, "serve", "mlp=" + os.path.join(tmp, "runs", "mlp"),
                                                                 "--port", "0", "--max-batch", "32", "--max-delay-us", "500",
                                                                 "--http-threads", "80"]),
            ("gradmesh serve, batching off", [g, "serve", "mlp=" + os.path.join(tmp, "runs", "mlp"), "--port", "0",
                                              "--max-batch", "1", "--http-threads", "80"]),
            ("PyTorch + ThreadingHTTPServer (anchor)", ["/usr/bin/python3", os.path.join(ROOT, "bench", "serve_torch_anchor.py"),
                                                        os.path.join(tmp, "runs", "mlp", "model.safetensors")]),
        ]
        best = {}
        if args.part not in ("all", "infer"):
            sides = []
        if sides:
            print(cpu_line())
            print("Open loop (gradmesh bench http, 64 keep-alive connections, 1 s warm-up, "
                  f"{args.seconds} s per point); latency from each request's due time.")
            print()
            print("| server | offered requests/s | answered requests/s | p50 (ms) | p99 (ms) | non-2xx | unanswered |")
            print("|---|---|---|---|---|---|---|")
        for name, cmd in sides:
            proc, port = start(cmd, os.path.join(tmp, "server.log"), r"listening on 127\.0\.0\.1:(\d+)")
            try:
                binary = "binary" in name
                headers = (["Content-Type: application/octet-stream", f"Inference-Header-Content-Length: {len(header)}"]
                           if binary else ["Content-Type: application/json"])
                sweep(name, g, port, "/v2/models/mlp/infer", binary_body if binary else body, headers, args.seconds,
                      OFFERED, best)
            finally:
                stop(proc)
        if sides:
            print()
            anchor = best.get(sides[-1][0], 0)
            print("| server | highest requests/s with p99 <= 10 ms | vs the anchor |")
            print("|---|---|---|")
            for name, _ in sides:
                rate = best.get(name, 0)
                print(f"| {name} | {rate:.0f} | {rate / anchor:.1f}x |" if anchor else f"| {name} | {rate:.0f} | - |")
        if args.part in ("all", "infer"):
            grpc_figures(g, tmp, args.seconds)
        if args.part in ("all", "batching"):
            batching_figures(g, tmp, args.seconds)
        if args.part in ("all", "http"):
            http_figures(g, tmp, args.seconds)
        if args.part not in ("all", "generate", "sharded"):
            return

        # Generation, on the small GPT and on one whose weights outweigh its arithmetic per token.
        subprocess.run([g, "data", "prepare-text", "--vocab", "char", "--output", "tokens"], cwd=tmp, check=True,
                       capture_output=True)
        for run_id, shape in GPT_MODELS:
            train_gpt(g, tmp, run_id, shape)
        if args.part in ("all", "generate"):
            print()
            print("| generation (64 tokens per sequence) | 8 sequences one at a time, tokens/s | 8 at once, tokens/s "
                  "| ratio | first token (ms) | per token after it (ms) |")
            print("|---|---|---|---|---|---|")
            for run_id, shape in GPT_MODELS:
                proc, port = start([g, "serve", "gpt=" + os.path.join(tmp, "runs", run_id), "--port", "0",
                                    "--max-streams", "8"], os.path.join(tmp, "server.log"),
                                   r"listening on 127\.0\.0\.1:(\d+)", cwd=tmp)
                try:
                    one, together, first, per_token = generation_figures(port)
                finally:
                    stop(proc)
                print(f"| {run_id} ({shape}) | {one:.0f} | {together:.0f} | {together / one:.1f}x | {first * 1000:.1f} "
                      f"| {per_token * 1000:.2f} |", flush=True)
        if args.part not in ("all", "sharded"):
            return

        # Sharded serving: the wide GPT whole, in two pipeline stages, in two tensor shards.
        run_id, shape = GPT_MODELS[-1]
        tokens_body = os.path.join(tmp, "tokens.json")
        with open(tokens_body, "w") as f:
            json.dump({"inputs": [{"name": "tokens", "shape": [1, 32], "datatype": "INT64",
                                   "data": [(i * 7) % 60 + 1 for i in range(32)]}]}, f)
        print()
        print(f"| {run_id} served | connections | requests/s | p50 (ms) | p99 (ms) | errors |")
        print("|---|---|---|---|---|---|")
        gen_rows = []
        for layout, extra in [("one process", []), ("pp=2 (2 processes)", ["--mesh", "pp=2"]),
                              ("tp=2 (2 processes)", ["--mesh", "tp=2"])]:
            proc, port = start([g, "serve", "gpt=" + os.path.join(tmp, "runs", run_id), "--port", "0",
                                "--max-batch", "8", "--max-delay-us", "500", "--inference-threads", "2",
                                "--max-streams", "8"] + extra,
                               os.path.join(tmp, "server.log"), r"listening on 127\.0\.0\.1:(\d+)", cwd=tmp)
            try:
                for c in (1, 4, 16):
                    rate, p50, p99, errors = wrk(port, "/v2/models/gpt/infer", tokens_body, c, args.seconds)
                    print(f"| {layout} | {c} | {rate:.0f} | {p50:.2f} | {p99:.2f} | {errors} |", flush=True)
                gen_rows.append((layout,) + generation_figures(port))
            finally:
                stop(proc)
        print()
        print(f"| {run_id} generation | 8 one at a time, tokens/s | 8 at once, tokens/s | first token (ms) "
              "| per token after it (ms) |")
        print("|---|---|---|---|---|")
        for layout, one, together, first, per_token in gen_rows:
            print(f"| {layout} | {one:.0f} | {together:.0f} | {first * 1000:.1f} | {per_token * 1000:.2f} |")


# (run id, config overrides): examples/gpt.toml as it is (0.8 M parameters), and
# wider (6.4 M), where a decoded token's time goes into reading the weights.
GPT_MODELS = [("gpt", "examples/gpt.toml, 0.8 M parameters"),
              ("gpt-wide", "n_embd 384, 4 blocks, 7.2 M parameters")]
GPT_OVERRIDES = {"gpt": [], "gpt-wide": ["--set", "model.n_embd=384", "--set", "model.n_head=6"]}


def grpc_figures(g, tmp, seconds):
    """ModelInfer over gRPC, closed loop from Python's grpcio (bench/serve_grpc_load.py), the same image."""
    print()
    print("gRPC (--grpc-port; closed loop: a Python grpcio client keeping WINDOW calls in flight, which may be "
          "the limit; same server options as the batching row)")
    print()
    print("| request form | calls in flight | requests/s | p50 (ms) | p99 (ms) | errors |")
    print("|---|---|---|---|---|---|")
    proc, _ = start([g, "serve", "mlp=" + os.path.join(tmp, "runs", "mlp"), "--port", "0", "--grpc-port", "0",
                     "--max-batch", "32", "--max-delay-us", "500", "--http-threads", "80"],
                    os.path.join(tmp, "server.log"), r"listening on 127\.0\.0\.1:(\d+)")
    try:
        port = None
        for _ in range(50):
            m = re.search(r"gRPC.*127\.0\.0\.1:(\d+)", open(os.path.join(tmp, "server.log")).read())
            if m:
                port = m.group(1)
                break
            time.sleep(0.1)
        for form in ("raw", "typed"):
            for window in (8, 32, 64):
                out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "serve_grpc_load.py"), port, "mlp",
                                      str(window), str(seconds), form], capture_output=True, text=True).stdout
                r = json.loads(out)
                print(f"| {form} | {window} | {r['rate']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['errors']} |",
                      flush=True)
    finally:
        stop(proc)


def batching_figures(g, tmp, seconds):
    """Dynamic batching on against off where a forward pass costs more than its
    request's HTTP and JSON: a wide MLP (784-2048-2048-2048-10, 10.5 M
    parameters, 42 MB of weights), whose one-row pass reads all its weights."""
    subprocess.run([g, "train", os.path.join(ROOT, "examples", "mlp.toml"), "--set", "output.run_id=wide-mlp",
                    "--set", "model.hidden=[2048,2048,2048]", "--set", "data.limit_train=1024",
                    "--set", "output.report=false"], cwd=tmp, check=True, capture_output=True)
    body = os.path.join(tmp, "image.json")
    model = "mlp=" + os.path.join(tmp, "runs", "wide-mlp")
    sides = [("wide MLP, batching on (--max-batch 16)", ["--max-batch", "16", "--max-delay-us", "2000"]),
             ("wide MLP, batching on, --training-products (sgemm)", ["--max-batch", "16", "--max-delay-us", "2000",
                                                                    "--training-products"]),
             ("wide MLP, batching off (--max-batch 1)", ["--max-batch", "1"])]
    print()
    print("| server | offered requests/s | answered requests/s | p50 (ms) | p99 (ms) | non-2xx | unanswered |")
    print("|---|---|---|---|---|---|---|")
    best = {}
    for name, flags in sides:
        proc, port = start([g, "serve", model, "--port", "0", "--http-threads", "80"] + flags,
                           os.path.join(tmp, "server.log"), r"listening on 127\.0\.0\.1:(\d+)")
        try:
            sweep(name, g, port, "/v2/models/mlp/infer", body, ["Content-Type: application/json"], seconds,
                  [100, 200, 400, 600, 800, 1000, 1200, 1500, 2000, 2500, 3000, 4000, 5000], best)
        finally:
            stop(proc)
    off = best.get(sides[-1][0], 0)
    print()
    print("| wide MLP | highest requests/s with p99 <= 10 ms | against batching off (target 3x) |")
    print("|---|---|---|")
    for name, _ in sides:
        rate = best.get(name, 0)
        print(f"| {name} | {rate:.0f} | {rate / off:.1f}x |" if off else f"| {name} | {rate:.0f} | - |")


def http_figures(g, tmp, seconds):
    """The HTTP layer alone (the event-driven front end, net/http_server.h, and the routes, no model): GET
    /v2/health/ready, against one inference request's cost above."""
    proc, port = start([g, "serve", "mlp=" + os.path.join(tmp, "runs", "mlp"), "--port", "0", "--http-threads", "80"],
                       os.path.join(tmp, "server.log"), r"listening on 127\.0\.0\.1:(\d+)")
    print()
    print("| GET /v2/health/ready (the HTTP layer alone) | connections | requests/s | p50 (ms) | p99 (ms) |")
    print("|---|---|---|---|---|")
    try:
        for c in (1, 8, 32):
            rate, p50, p99, _ = wrk(port, "/v2/health/ready", None, c, seconds)
            print(f"| gradmesh serve (Boost.Beast front end) | {c} | {rate:.0f} | {p50:.2f} | {p99:.2f} |", flush=True)
    finally:
        stop(proc)


def train_gpt(g, tmp, run_id, shape):
    subprocess.run([g, "train", os.path.join(ROOT, "examples", "gpt.toml"), "--set", f"output.run_id={run_id}",
                    "--set", "data.tokens=tokens", "--set", "train.max_steps=60", "--set", "output.report=false"]
                   + GPT_OVERRIDES[run_id], cwd=tmp, check=True, capture_output=True)


def generation_figures(port):
    """8 sequences of 64 tokens one at a time, then at once (tokens/s each); the
    first token's time and the time per token after it, of a streamed request."""
    def request(seed):
        return json.loads(post(port, "/v2/models/gpt/generate",
                               {"text_input": "The ", "parameters": {"max_tokens": 64, "seed": seed}}))

    request(0)  # warm-up
    t0 = time.time()
    tokens = sum(request(s)["tokens"] for s in range(8))
    one_at_a_time = tokens / (time.time() - t0)
    results = [None] * 8
    threads = [threading.Thread(target=lambda s=s: results.__setitem__(s, request(s))) for s in range(8)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together = sum(r["tokens"] for r in results) / (time.time() - t0)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/gpt/generate_stream",
                                 data=json.dumps({"text_input": "The ", "parameters": {"max_tokens": 64}}).encode())
    t0 = time.time()
    with urllib.request.urlopen(req) as r:
        r.readline()
        first = time.time() - t0
        rest = r.read()
    total = time.time() - t0
    events = rest.count(b"data: ") + 1
    return one_at_a_time, together, first, (total - first) / max(events - 1, 1)


if __name__ == "__main__":
    main()
