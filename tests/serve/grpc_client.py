#!/usr/bin/env python3
"""A gRPC client of the inference protocol that shares no code with gradmesh:
Debian's grpcio, and message classes protoc generates from
src/gradmesh/serve/grpc_service.proto into a temporary directory.

usage: grpc_client.py PORT TOKEN WORKDIR
Calls every method (with the token in the metadata, and without it where
that must fail) and prints one JSON object of what came back, for
tests/serve/grpc_front_test.cc to check. Exit 77: grpcio, protobuf or
protoc is missing (the test then skips, saying so).
"""
import json, os, struct, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    port, token, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        import grpc  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as e:
        print(f"missing: {e} (python3-grpcio, python3-protobuf)")
        return 77
    proto_dir = os.path.join(ROOT, "src", "gradmesh", "serve")
    try:
        subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={workdir}", "grpc_service.proto"],
                       check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"protoc failed: {e} (protobuf-compiler)")
        return 77
    sys.path.insert(0, workdir)
    import grpc
    import grpc_service_pb2 as pb

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=20)

    def call(method, request, response_class, auth=True):
        rpc = channel.unary_unary(f"/inference.GRPCInferenceService/{method}",
                                  request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=response_class.FromString)
        metadata = [("authorization", f"bearer {token}")] if auth and token else []
        try:
            return rpc(request, metadata=metadata, timeout=20), None
        except grpc.RpcError as e:
            return None, {"code": e.code().name, "message": e.details()}

    out = {}
    live, _ = call("ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse, auth=False)
    out["live"] = live.live
    ready, _ = call("ServerReady", pb.ServerReadyRequest(), pb.ServerReadyResponse, auth=False)
    out["ready"] = ready.ready
    meta, _ = call("ServerMetadata", pb.ServerMetadataRequest(), pb.ServerMetadataResponse)
    out["server_name"] = meta.name
    _, out["no_token"] = call("ServerMetadata", pb.ServerMetadataRequest(), pb.ServerMetadataResponse, auth=False)
    model, _ = call("ModelMetadata", pb.ModelMetadataRequest(name="tiny"), pb.ModelMetadataResponse)
    out["model"] = {"name": model.name, "versions": list(model.versions), "platform": model.platform,
                    "input_shape": list(model.inputs[0].shape), "input_datatype": model.inputs[0].datatype,
                    "outputs": [o.name for o in model.outputs]}
    model_ready, _ = call("ModelReady", pb.ModelReadyRequest(name="tiny"), pb.ModelReadyResponse)
    out["model_ready"] = model_ready.ready
    _, out["unknown_model"] = call("ModelReady", pb.ModelReadyRequest(name="nope"), pb.ModelReadyResponse)

    rows = [0.1, 0.2, 0.3, 0.4, -1.0, 0.5, 2.0, 0.0]

    def infer_request(values, shape, datatype="FP32"):
        r = pb.ModelInferRequest(model_name="tiny", id="req-7")
        t = r.inputs.add(name="input", datatype=datatype, shape=shape)
        if values is not None:
            t.contents.fp32_contents.extend(values)
        return r

    typed, error = call("ModelInfer", infer_request(rows, [2, 4]), pb.ModelInferResponse)
    out["typed_error"] = error
    if typed is not None:
        out["typed"] = {"id": typed.id, "version": typed.model_version,
                        "outputs": {o.name: {"shape": list(o.shape), "datatype": o.datatype,
                                             "fp32": list(o.contents.fp32_contents),
                                             "int64": list(o.contents.int64_contents)} for o in typed.outputs}}
    raw = infer_request(None, [2, 4])
    raw.raw_input_contents.append(struct.pack("<8f", *rows))
    raw.outputs.add(name="logits")
    raw_reply, error = call("ModelInfer", raw, pb.ModelInferResponse)
    out["raw_error"] = error
    if raw_reply is not None:
        data = raw_reply.raw_output_contents[0]
        out["raw"] = {"names": [o.name for o in raw_reply.outputs],
                      "logits": list(struct.unpack(f"<{len(data) // 4}f", data))}
    bad = {
        "short": infer_request([1.0, 2.0, 3.0], [1, 4]),
        "shape": infer_request([1.0, 2.0, 3.0, 4.0], [1, 2, 2]),
        "nan": infer_request([1.0, float("nan"), 3.0, 4.0], [1, 4]),
        "datatype": infer_request([1.0, 2.0, 3.0, 4.0], [1, 4], "FP8"),
    }
    out["bad"] = {k: call("ModelInfer", r, pb.ModelInferResponse)[1] for k, r in bad.items()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
