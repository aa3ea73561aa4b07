#!/usr/bin/env python3
"""The serving anchor of bench/serve.py: the quick deployment people write.
The reference MLP in PyTorch (one thread, evaluation mode, no autograd)
behind Python's ThreadingHTTPServer, answering the Open Inference Protocol's
JSON infer request one request at a time (batch 1).

usage: bench/serve_torch_anchor.py MODEL.safetensors   (prints "listening on 127.0.0.1:PORT")
"""
import json, struct, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import torch


def load_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = torch.from_numpy(np.frombuffer(raw[8 + n + begin:8 + n + end], dtype=np.float32)
                                         .reshape(info["shape"]).copy())
    return tensors


def main():
    torch.set_num_threads(1)
    weights = load_safetensors(sys.argv[1])
    # gradmesh's MLP: Flatten (0), Linear (1), ReLU (2), Linear (3), ReLU (4), Linear (5).
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    model.load_state_dict(weights)
    model.eval()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as wrk expects
        # The response goes out as headers, then body: without TCP_NODELAY the
        # body waits for the client's delayed ACK (40 ms), which would measure
        # the kernel's timer, not the server. gradmesh serve sets it too.
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            x = body["inputs"][0]
            with torch.no_grad():
                logits = model(torch.tensor(x["data"], dtype=torch.float32).reshape(x["shape"]))
            out = json.dumps({"model_name": "mlp", "model_version": "1", "outputs": [
                {"name": "logits", "shape": list(logits.shape), "datatype": "FP32", "data": logits.flatten().tolist()},
                {"name": "class", "shape": [logits.shape[0]], "datatype": "INT64",
                 "data": logits.argmax(1).tolist()}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
