// The Kubernetes manifests (deploy/k8s), offline: every variant renders with
// `kubectl kustomize`, every object validates against the Kubernetes API
// schemas and the pods give `gradmesh launch` what it needs
// (deploy/k8s/validate/validate.js, checked against this build's --help);
// the etcd variant forms a cluster the launchers name member by member
// (validate/etcd.js); broken manifests are rejected; the job's config is one
// gradmesh accepts; and the launcher honours the variables Kubeflow's
// PyTorchJob sets.
// Skipped, saying why, where kubectl, Node.js or the validator's packages
// are missing (manifests_fixture.h). The production rules (validate/rules.js)
// have their own file, kubernetes_rules_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "deploy/manifests_fixture.h"

namespace gradmesh::testing {
namespace {

TEST_F(KubernetesManifests, EveryVariantRendersAndValidates) {
  // The etcd component on the gpu overlay, and the monitoring one on the
  // cpu overlay, as docs/kubernetes.md tells users to add them.
  const std::string monitoring = compose("cpu-monitoring", "overlays/cpu", "components/monitoring");
  const std::string gpu_etcd = compose("gpu-etcd", "overlays/gpu", "components/etcd");
  for (const std::string variant : {"overlays/cpu", "overlays/gpu", "pytorchjob", "overlays/etcd", monitoring.c_str(),
                                    gpu_etcd.c_str()}) {
    ASSERT_EQ(render(variant), 0) << variant;
    const CommandResult r = validate();
    EXPECT_EQ(r.exit_code, 0) << variant << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("objects valid"), std::string::npos) << r.out;
    if (variant == monitoring) {
      EXPECT_NE(read_file(dir_.file("rendered.yaml")).find("kind: ServiceMonitor"), std::string::npos);
    }
  }
  const std::string rendered = read_file(dir_.file("rendered.yaml"));
  EXPECT_NE(rendered.find("nvidia.com/gpu: \"2\""), std::string::npos);
  EXPECT_NE(rendered.find("kind: StatefulSet"), std::string::npos);
  EXPECT_EQ(rendered.find("redis"), std::string::npos) << "the etcd component removes every trace of Redis";
}

TEST_F(KubernetesManifests, BrokenManifestsAreRejectedWithTheReason) {
  ASSERT_EQ(render("overlays/cpu"), 0);
  expect_rejected({
      {"", "--agent-port=29400", "--agent-prt=29400", "gradmesh launch has no flag --agent-prt"},
      {"", "completions: 4", "completions: four", "must be integer"},
      {"", "name: GRADMESH_REDIS_PASSWORD_FILE", "name: GRADMESH_REDIS_PASSWORD", "holds a literal value"},
      {"", "--rdzv-id=$(JOB_UID)", "--rdzv-id=$(POD_INDEX)", "$(POD_INDEX)"},
      {"", "terminationGracePeriodSeconds: 90", "terminationGracePeriodSeconds: 30", "must exceed --grace-period"},
      {"", "--resume=auto", "--epochs-nope", "gradmesh train has no flag --epochs-nope"},
      {"", "completionMode: Indexed", "completionMode: NonIndexed", "must be Indexed"},
  });
}

// The etcd variant's own checks (validate/etcd.js), each on a rendering
// broken the way a hand edit could break it.
TEST_F(KubernetesManifests, BrokenEtcdManifestsAreRejectedWithTheReason) {
  ASSERT_EQ(render("overlays/etcd"), 0);
  const std::string kMembers =
      "gradmesh-etcd-0.gradmesh-etcd:2379,gradmesh-etcd-1.gradmesh-etcd:2379,gradmesh-etcd-2.gradmesh-etcd:2379";
  expect_rejected({
      {"kind: StatefulSet", "replicas: 3", "replicas: 2", "needs 3, 5 or 7 members"},
      {"", "gradmesh-etcd-2=http://gradmesh-etcd-2.gradmesh-etcd:2380", "gradmesh-etcd-3=http://gradmesh-etcd-3.gradmesh-etcd:2380",
       "--initial-cluster names gradmesh-etcd-0, gradmesh-etcd-1, gradmesh-etcd-3, but the pods are"},
      {"", "gradmesh-etcd-1=http://gradmesh-etcd-1.gradmesh-etcd:2380", "gradmesh-etcd-1=http://gradmesh-etcd-1.etcd:2380",
       "but it advertises http://gradmesh-etcd-1.gradmesh-etcd:2380"},
      {"kind: StatefulSet", "serviceName: gradmesh-etcd", "serviceName: gradmesh-etcd-client", "must be headless"},
      {"", "publishNotReadyAddresses: true\n  selector:\n    app.kubernetes.io/name: gradmesh-etcd",
       "publishNotReadyAddresses: false\n  selector:\n    app.kubernetes.io/name: gradmesh-etcd", "must publish not-ready addresses"},
      {"", "podManagementPolicy: Parallel", "podManagementPolicy: OrderedReady", "must be Parallel"},
      {"", "--rdzv-endpoint=etcd://" + kMembers, "--rdzv-endpoint=etcd://gradmesh-etcd-0.gradmesh-etcd:2379,gradmesh-etcd-1.gradmesh-etcd:2379",
       "--rdzv-endpoint leaves out gradmesh-etcd-2"},
      {"--rdzv-endpoint", "gradmesh-etcd-2.gradmesh-etcd:2379", "gradmesh-etcd-2.gradmesh-etcd:2380",
       "the members serve clients on port 2379"},
      {"", "--rdzv-endpoint=etcd://" + kMembers, "--rdzv-endpoint=etcd://gradmesh-etcd-client:2379",
       "gradmesh-etcd-client is no member of an etcd StatefulSet"},
      {"", "--rdzv-endpoint=etcd://", "--rdzv-endpoint=etcd://root:hunter2@", "a store password on the command line"},
      {"kind: PodDisruptionBudget", "minAvailable: 2", "minAvailable: 1", "lets 2 of 3 members go at once"},
      {"kind: PodDisruptionBudget", "app.kubernetes.io/name: gradmesh-etcd", "app.kubernetes.io/name: etcd",
       "no PodDisruptionBudget selects the members"},
      {"podAntiAffinity", "topologyKey: kubernetes.io/hostname", "topologyKey: kubernetes.io/os", "no pod anti-affinity"},
      {"kind: NetworkPolicy", "port: 2379", "port: 2389", "do not let the launchers reach the members' client port 2379"},
      {"kind: NetworkPolicy", "port: 2380", "port: 2389", "do not let the members reach each other's peer port 2380"},
      {"", "--data-dir=/var/lib/etcd/data", "--data-dir=/tmp/data", "must be on a volumeClaimTemplate"},
      {"", "path: /health?serializable=true&exclude=NOSPACE", "path: /health", "must ask /health?serializable=true"},
      {"", "quay.io/coreos/etcd:v3.5.", "quay.io/coreos/etcd:v3.4.", "pin an etcd release, 3.5.3 or later"},
      {"kind: StatefulSet", "runAsNonRoot: true", "runAsNonRoot: false", "must set securityContext.runAsNonRoot"},
      {"", "- name: GRADMESH_PROGRESS", "- name: GRADMESH_ETCD_CACERT\n          value: /run/secrets/gradmesh-agent/ca.pem\n        - name: GRADMESH_PROGRESS",
       "GRADMESH_ETCD_CACERT with a plain etcd:// endpoint"},
      {"      volumes:", "- name: agent-token", "- name: redis-password\n        secret:\n          secretName: gradmesh-redis\n      - name: agent-token",
       "mounts the Secret gradmesh-redis"},
  });
  // Redis left beside etcd: the base's StatefulSet and Service, as they were.
  std::ofstream(dir_.file("broken.yaml")) << read_file(dir_.file("rendered.yaml")) << "---\n"
                                          << read_file(kDeploy + "/base/redis.yaml");
  const CommandResult r = validate("broken.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("StatefulSet/gradmesh-redis: a Redis store is rendered"), std::string::npos) << r.out;
}

// The launcher's own checks on the pods' arguments (flag combinations the
// schema cannot know, such as --node-rank with an elastic --nnodes): each
// launcher's flags run for real, with the store, the token and the $(VARS)
// replaced by local stand-ins. A launcher that accepts them waits for the
// other nodes and times out (exit 1); a usage error would exit 2. An etcd
// endpoint runs once more as written: the launcher must parse it into the
// same members and fail only to reach them (exit 1, naming them).
TEST_F(KubernetesManifests, TheLauncherAcceptsThePodsFlags) {
  std::ofstream(dir_.file("agent-token")) << "local-token\n";
  int checked = 0;
  int etcd_endpoints = 0;
  for (const std::string variant : {"overlays/cpu", "pytorchjob", "overlays/etcd"}) {
    ASSERT_EQ(render(variant), 0) << variant;
    std::filesystem::remove(dir_.file("launch-args.jsonl"));
    const CommandResult v = run_shell("node '" + kDeploy + "/validate/validate.js' --launch-help launch.help "
                                      "--train-help train.help --serve-help serve.help --launch-args launch-args.jsonl "
                                      "rendered.yaml", dir_.path());
    ASSERT_EQ(v.exit_code, 0) << v.out;
    // What Kubeflow's operator sets on the master (the Indexed Job sets none).
    const std::string pet = variant == "pytorchjob" ? "PET_NNODES=4 PET_NODE_RANK=0 PET_NPROC_PER_NODE=2 " : "";
    std::ifstream lines(dir_.file("launch-args.jsonl"));
    for (std::string line; std::getline(lines, line); ++checked) {
      const std::string stand_in = "local-" + std::to_string(checked);
      const std::string args = local_launch_args(line, stand_in, false);
      const CommandResult r = run_shell(pet + "'" GRADMESH_BINARY "'" + args + " --join-timeout=1 -- true", dir_.path());
      EXPECT_EQ(r.exit_code, 1) << variant << ":" << args << "\n" << r.err;
      EXPECT_NE(r.err.find("rendezvous"), std::string::npos) << r.err;

      std::smatch endpoint;
      if (!std::regex_search(line, endpoint, std::regex("\"--rdzv-endpoint=(etcds?://[^\"]*)\""))) continue;
      ++etcd_endpoints;
      const std::string as_written = local_launch_args(line, stand_in, true);
      const CommandResult e =
          run_shell(pet + "'" GRADMESH_BINARY "'" + as_written + " --store-timeout=1 --join-timeout=1 -- true", dir_.path());
      EXPECT_EQ(e.exit_code, 1) << variant << ":" << as_written << "\n" << e.err;
      // As the launcher describes the endpoint: every member with its port.
      const std::string described = std::regex_replace(endpoint[1].str(), std::regex("(//|,)([^,:/]+)(?=,|$)"), "$1$2:2379");
      EXPECT_NE(e.err.find("cannot reach any etcd member of " + described + ":"), std::string::npos) << e.err;
    }
  }
  EXPECT_EQ(checked, 4) << "the Job's launcher, the PyTorchJob's two and the etcd variant's";
  EXPECT_EQ(etcd_endpoints, 1) << "the etcd variant's launcher";
}

TEST_F(KubernetesManifests, TheJobsConfigIsOneGradmeshAccepts) {
  const CommandResult r = run_gradmesh("plan '" + kDeploy + "/base/train.toml' --workers 8", dir_.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Kubeflow's training operator sets PET_NNODES, PET_NODE_RANK and
// PET_NPROC_PER_NODE instead of flags, as torchrun reads them; flags win.
TEST(OperatorEnvironment, LaunchReadsThePetVariablesAndFlagsWin) {
  TempDir dir;
  const CommandResult r = run_shell("PET_NNODES=1 PET_NODE_RANK=0 PET_NPROC_PER_NODE=3 '" GRADMESH_BINARY
                                    "' launch -- sh -c 'echo world=$WORLD_SIZE'",
                                    dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("world=3"), std::string::npos) << r.out;
  const CommandResult flags = run_shell("PET_NPROC_PER_NODE=3 '" GRADMESH_BINARY
                                        "' launch --nproc-per-node 2 -- sh -c 'echo world=$WORLD_SIZE'",
                                        dir.path());
  EXPECT_NE(flags.out.find("world=2"), std::string::npos) << flags.out;
  const CommandResult bad = run_shell("PET_NODE_RANK=first '" GRADMESH_BINARY "' launch -- true", dir.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("PET_NODE_RANK"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace gradmesh::testing
