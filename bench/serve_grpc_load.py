#!/usr/bin/env python3
"""Closed-loop gRPC load for bench/serve.py: ModelInfer of one 28x28 image
(FP32, as raw_input_contents or as typed fp32_contents) with WINDOW calls
in flight from Debian's grpcio, for SECONDS after a 1 s warm-up. The client
is Python, so it may be the limit; it shares the cores with the server.

usage: serve_grpc_load.py PORT MODEL WINDOW SECONDS raw|typed
Prints one JSON object: requests per second, p50 and p99 in ms, errors.
"""
import json, os, struct, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    port, model, window, seconds, form = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    work = tempfile.mkdtemp()
    subprocess.run(["protoc", f"--proto_path={os.path.join(ROOT, 'src', 'gradmesh', 'serve')}", f"--python_out={work}",
                    "grpc_service.proto"], check=True)
    sys.path.insert(0, work)
    import grpc
    import grpc_service_pb2 as pb

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=20)
    rpc = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                              request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=pb.ModelInferResponse.FromString)
    pixels = [((i * 37) % 255) / 255.0 for i in range(784)]
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="input", datatype="FP32", shape=[1, 784])
    if form == "raw":
        request.raw_input_contents.append(struct.pack("<784f", *pixels))
    else:
        tensor.contents.fp32_contents.extend(pixels)
    lock = threading.Lock()
    latencies, errors = [], [0]
    measuring = [False]
    done = threading.Event()

    def issue():
        start = time.perf_counter()
        future = rpc.future(request, timeout=30)

        def finished(f):
            elapsed = time.perf_counter() - start
            with lock:
                if f.exception() is not None:
                    errors[0] += 1
                elif measuring[0]:
                    latencies.append(elapsed)
            if not done.is_set():
                issue()
        future.add_done_callback(finished)

    for _ in range(window):
        issue()
    time.sleep(1)
    with lock:
        measuring[0] = True
    time.sleep(seconds)
    with lock:
        measuring[0] = False
        got = sorted(latencies)
    done.set()
    time.sleep(0.5)
    n = len(got)
    pct = lambda p: got[min(n - 1, int(p * n))] * 1000 if n else None
    print(json.dumps({"rate": n / seconds, "p50_ms": pct(0.5), "p99_ms": pct(0.99), "errors": errors[0],
                      "window": window, "form": form}))
    os._exit(0)


if __name__ == "__main__":
    main()
