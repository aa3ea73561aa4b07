#!/usr/bin/env bash
# Installs exactly the Debian packages gradmesh needs; safe to run repeatedly.
# usage: scripts/install-deps.sh [--bench|--test|--python]
#   --python  Debian's PyTorch with its C++ headers and pybind11: the torch.distributed backend (make python)
#   --bench   that, and what the PyTorch anchors in bench/ use
#   --test    that, a browser and gRPC's Python client
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config   # build
  libopenblas-dev                         # GEMM (cblas_sgemm)
  libdnnl-dev                             # bf16 GEMM (oneDNN matmul on AVX512_BF16 / AMX)
  ocl-icd-opencl-dev                      # oneDNN's CMake package requires OpenCL, which libdnnl-dev only recommends
  libtomlplusplus-dev                     # config files
  nlohmann-json3-dev                      # safetensors headers, JSONL
  libcli11-dev                            # command line
  zlib1g-dev                              # gzipped IDX files
  libturbojpeg0-dev libspng-dev           # JPEG and PNG samples (image folders, MDS jpeg/png columns)
  libsentencepiece-dev                    # subword tokenizer (gradmesh data prepare-text --vocab sentencepiece)
  libxxhash-dev                           # stable hashes (store-key file names, shm segment names, collective fingerprints)
  libhiredis-dev redis-server             # cluster rendezvous store (tests start a real server)
  etcd-server etcd-client                 # replicated rendezvous store (tests start a real 3-member cluster; etcdctl to inspect it)
  openssl                                 # the etcd TLS test's certificates
  libgloo-dev                             # TCP collectives
  libcpp-httplib-dev                      # the HTTP server of gradmesh serve
  libboost-dev                            # Boost.Beast and Asio: the event-driven HTTP server (net/http_server.cc)
  libgrpc++-dev                           # the inference protocol over gRPC (serve/grpc_front.cc)
  libopenmpi-dev openmpi-bin              # the MPI backend and mpirun
  iproute2                                # network-namespace tests (two emulated hosts)
  libgtest-dev libgmock-dev               # tests
  dataset-fashion-mnist                   # the reference dataset
  fortunes                                # the default text corpus (gradmesh data prepare-text)
)
# The torch.distributed backend (python/gradmesh/torch, src/gradmesh/pytorch):
# PyTorch's C++ headers and libraries, pybind11 and Python's headers.
torch_backend=(python3-torch libtorch-dev pybind11-dev python3-dev)
if [[ "${1:-}" =~ ^--(python|bench|test)$ ]]; then
  packages+=("${torch_backend[@]}")
fi
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch python3-numpy python3-torchvision python3-pil python3.11-doc python3-xxhash)  # the PyTorch anchors in bench/, the loader anchor, a larger text corpus, shard checksums
fi
if [[ "${1:-}" == "--test" ]]; then
  # The dashboard's browser test (tests/cli/dashboard_browser.py): headless
  # Chromium driven by Selenium. `make test` installs them; the test skips,
  # saying so, where they are missing.
  packages+=(chromium chromium-driver python3-selenium)
  # The gRPC front end's client test (tests/serve/grpc_client.py): Python's
  # grpcio with stubs protoc makes from serve/grpc_service.proto, a client
  # that shares no code with the server.
  packages+=(python3-grpcio python3-protobuf protobuf-compiler)
  # A real Prometheus scrapes the agent's /metrics with the Job's token
  # (tests/deploy/kubernetes_rules_test.cc); without it that part is skipped.
  packages+=(prometheus curl)
fi

# The deployment checks (tests/deploy): Node.js for the offline schema
# validator and kubectl for kustomize, each only where the machine has none.
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)
command -v kubectl >/dev/null 2>&1 || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The validator's pinned packages (deploy/k8s/validate/package-lock.json).
# Without the npm registry the deployment tests skip, saying so.
validate="$(dirname "$0")/../deploy/k8s/validate"
if command -v npm >/dev/null 2>&1 && [[ ! -d "$validate/node_modules/kubernetes-models" ]]; then
  (cd "$validate" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "warning: npm ci in deploy/k8s/validate failed; the Kubernetes manifest tests will skip"
fi
