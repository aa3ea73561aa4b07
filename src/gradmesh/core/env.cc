#include "gradmesh/core/env.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh {

const std::vector<EnvVar>& env_registry() {
  static const std::vector<EnvVar> vars = {
      {"GRADMESH_DEBUG", "INFO", "Log level: ERROR, WARN, INFO or TRACE. Logs go to stderr, prefixed with the rank."},
      {"GRADMESH_MAX_CPU_ISA", "", "Caps the instruction-set level of gradmesh's own kernels: baseline, avx2 or avx512. Empty: the CPU's best. (oneDNN's own cap is ONEDNN_MAX_CPU_ISA.)"},
      {"GRADMESH_ROOFS_CACHE", "", "Folder where the GEMM roofs printed at the start of a run are cached (measured once per CPU, thread count and BLAS setup). Empty: $XDG_CACHE_HOME/gradmesh, else ~/.cache/gradmesh. off: neither measured nor printed."},
      {"GRADMESH_NUM_THREADS", "", "Compute threads (BLAS and gradmesh's own kernels) when train.threads (or bench gemm --threads) is 0: an integer from 1 to 1024. Empty: all cores."},
      {"GRADMESH_ALLOC_CACHE", "1", "Reuse freed tensor storage of the same size (0 turns the cache off, e.g. for memory debugging)."},
      {"GRADMESH_DATA_DIR", "/usr/share/datasets/fashion-mnist", "Where data.dir defaults to: the Fashion-MNIST IDX files (Debian package dataset-fashion-mnist)."},
      {"GRADMESH_PROGRESS", "auto", "Progress output: auto (a bar on a terminal, periodic lines otherwise), bar, lines or off."},
      {"GRADMESH_STORE", "", "Rendezvous store endpoint a worker joins (file:///dir, redis://[:password@]host:port[/db] or etcd://host:port[,host:port...]); set by gradmesh launch."},
      {"GRADMESH_RUN_ID", "", "Run id shared by all workers of one job; namespaces the store. Set by gradmesh launch."},
      {"GRADMESH_GENERATION", "0", "Restart generation of the worker group; namespaces the store so a restarted group never reads stale keys."},
      {"GRADMESH_HEARTBEAT_INTERVAL", "1", "Seconds between a worker's heartbeats to the launcher (store key <run id>/<generation>/heartbeat/<rank>): a number from 0.01 to 3600. Keep it well below `gradmesh launch --heartbeat-timeout`."},
      {"GRADMESH_REPLACEMENT", "0", "1 in a worker that `gradmesh launch` started to replace a failed one in place (elastic.recovery = \"in-process\"): it joins the survivors under GRADMESH_GENERATION. Set by gradmesh launch."},
      {"GRADMESH_REDIS_PASSWORD", "", "Redis AUTH password when the redis:// endpoint carries none (keeps it out of process listings)."},
      {"GRADMESH_REDIS_PASSWORD_FILE", "", "A file holding the Redis AUTH password, read when neither the endpoint nor GRADMESH_REDIS_PASSWORD carries one: keeps it out of process listings and environment dumps (a mounted Kubernetes Secret). Trailing whitespace is ignored."},
      {"GRADMESH_ETCD_USER", "", "etcd user the etcd:// store authenticates as when the endpoint names none (etcd://user:@host); empty: the cluster has authentication off."},
      {"GRADMESH_ETCD_PASSWORD", "", "Password of the etcd user when the etcd:// endpoint carries none (keeps it out of process listings); gradmesh launch hands an endpoint's password to its workers here."},
      {"GRADMESH_ETCD_PASSWORD_FILE", "", "A file holding the etcd user's password, read when neither the endpoint nor GRADMESH_ETCD_PASSWORD carries one: keeps it out of process listings and environment dumps (a mounted Kubernetes Secret). Trailing whitespace is ignored."},
      {"GRADMESH_ETCD_CACERT", "", "etcds:// store: the PEM file of the CA that signed the etcd members' certificates. Empty: the system's CAs."},
      {"GRADMESH_ETCD_CERT", "", "etcds:// store: the client certificate (PEM) presented to members started with --client-cert-auth; needs GRADMESH_ETCD_KEY."},
      {"GRADMESH_ETCD_KEY", "", "etcds:// store: the private key (PEM) of GRADMESH_ETCD_CERT."},
      {"GRADMESH_BACKEND", "auto", "Process-group backend: auto, shm, gloo, hier or mpi. auto: mpi under mpirun/srun (OMPI_COMM_WORLD_RANK, PMI_RANK or PMIX_RANK set); else shm when every rank is on this host (LOCAL_WORLD_SIZE, default WORLD_SIZE, equals WORLD_SIZE); else hier when this host runs more than one rank, gloo when it runs one."},
      {"GRADMESH_COMM_TIMEOUT", "300", "Seconds any collective or store wait may block before it fails naming the missing ranks: a number from 0.001 to 604800 (7 days), fractions allowed (0.5). Also the default of `gradmesh launch --join-timeout`."},
      {"GRADMESH_STORE_TIMEOUT", "60", "Seconds a store client (launcher, worker, heartbeat, dashboard feed) keeps retrying an unreachable Redis store (or every member of an etcd store) before it fails naming the store: a number from 1 to 3600. Set by `gradmesh launch --store-timeout` for its workers."},
      {"GRADMESH_COMM_CHECK", "0", "1: fingerprint every collective (sequence, op, dtype, count, root) across ranks and fail at the first mismatch, naming both calls."},
      {"GRADMESH_GLOO_LAZY", "auto", "gloo: 1 connects each pair of ranks only when an operation first needs it (a ring needs 2 peers, halving-doubling and the barrier about log2 N), 0 connects every pair at start-up; auto: lazily in groups of more than 32 ranks, where a full mesh runs a host out of ports. Lazily, the first send/recv between two ranks is held back (posting returns at once) until the peer posts one for this rank."},
      {"GRADMESH_HOSTNAME", "", "Address TCP backends listen on and other hosts reach this one at. Empty: MASTER_ADDR if it is an address of this host, else this host's address on the route to MASTER_ADDR, else the host name."},
      {"GRADMESH_CHECKPOINT_PAUSE", "", "Test knob: <point>:<seconds> makes every checkpoint save sleep right after that step of the commit protocol (files, manifest, rename or latest; seconds from 0 to 3600), so a test can kill the process there. Empty: no pause."},
  };
  return vars;
}

static const EnvVar& find_var(const char* name) {
  for (const EnvVar& var : env_registry())
    if (std::strcmp(var.name, name) == 0) return var;
  throw_error(ErrorKind::kInternal, "env", std::string("undeclared environment variable ") + name);
}

std::string env_string(const char* name) {
  const EnvVar& var = find_var(name);
  const char* value = std::getenv(var.name);
  return value ? value : var.default_value;
}

bool env_flag(const char* name, bool fallback) {
  find_var(name);
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  std::string value(raw);
  std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off") return false;
  throw_error(ErrorKind::kUsage, std::string("environment variable ") + name,
              "expected 1/0, true/false, yes/no or on/off, got '" + std::string(raw) + "'");
}

std::optional<int64_t> env_int(const char* name, int64_t min, int64_t max) {
  if (std::strncmp(name, "GRADMESH_", 9) == 0) find_var(name);
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return std::nullopt;
  return parse_int(raw, std::string("environment variable ") + name, min, max, ErrorKind::kUsage);
}

std::chrono::milliseconds env_comm_timeout() {
  const double seconds = parse_double(env_string("GRADMESH_COMM_TIMEOUT"), "environment variable GRADMESH_COMM_TIMEOUT",
                                      kMinCommTimeoutSeconds, kMaxCommTimeoutSeconds, ErrorKind::kUsage);
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

std::chrono::milliseconds env_store_timeout() {
  const double seconds = parse_double(env_string("GRADMESH_STORE_TIMEOUT"), "environment variable GRADMESH_STORE_TIMEOUT",
                                      1, 3600, ErrorKind::kUsage);
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

std::string env_markdown() {
  std::string out = "| variable | default | meaning |\n|---|---|---|\n";
  for (const EnvVar& var : env_registry())
    out += std::string("| `") + var.name + "` | `" + var.default_value + "` | " + var.doc + " |\n";
  return out;
}

}  // namespace gradmesh
