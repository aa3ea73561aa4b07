// The validator's production rules (deploy/k8s/validate/rules.js and
// versions.js), each broken once in a rendering and rejected naming what,
// where and the rule; the rule table as docs/kubernetes.md prints it; the
// image the manifests run being the version this build is; and the agent's
// /metrics, started with the Job's own launcher flags, reachable off the
// loopback with the token only, and scraped by a real Prometheus where one
// is installed. Skipped, saying why, where kubectl, Node.js or the
// validator's packages are missing (manifests_fixture.h).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "deploy/manifests_fixture.h"

namespace gradmesh::testing {
namespace {

TEST_F(KubernetesManifests, EachProductionRuleRejectsWhatItGuards) {
  ASSERT_EQ(render("overlays/cpu"), 0);
  const std::string kJob = "Job/gradmesh-train container gradmesh: ";
  expect_rejected({
      // image-pinned, image-pull-policy
      {"", "image: localhost/gradmesh:0.1.0", "image: localhost/gradmesh:latest",
       "image localhost/gradmesh:latest is not pinned: latest moves; name an exact release (x.y.z) or a digest [image-pinned]"},
      {"", "redis:7.2.7-alpine", "redis:7-alpine",
       "StatefulSet/gradmesh-redis container redis: image docker.io/library/redis:7-alpine is not pinned"},
      {"kind: Job", "imagePullPolicy: IfNotPresent", "imagePullPolicyy: IfNotPresent",
       kJob + "sets no imagePullPolicy"},
      {"kind: Job", "imagePullPolicy: IfNotPresent", "imagePullPolicy: Always",
       kJob + "imagePullPolicy Always with localhost/gradmesh:0.1.0: localhost/ is no registry"},
      // spread
      {"kind: Job", "whenUnsatisfiable: DoNotSchedule", "whenUnsatisfiable: ScheduleAnyway",
       kJob + "no topologySpreadConstraint over kubernetes.io/hostname (maxSkew 1, whenUnsatisfiable DoNotSchedule)"},
      {"kind: Deployment", "topologyKey: kubernetes.io/hostname", "topologyKey: topology.kubernetes.io/zone",
       "Deployment/gradmesh-serve: 2 replicas and no topologySpreadConstraint or pod anti-affinity"},
      // threads-cpu: the overlay's count, the config's, and a contradicting BLAS variable
      {"name: GRADMESH_NUM_THREADS", "value: \"2\"", "value: \"1\"",
       kJob + "cpu request 4 and limit 4 must both be 2: 2 workers x 1 thread (GRADMESH_NUM_THREADS) [threads-cpu]"},
      {"", "threads = 0", "threads = 3",
       kJob + "cpu request 4 and limit 4 must both be 6: 2 workers x 3 threads (train.toml's train.threads)"},
      {"", "- name: GRADMESH_NUM_THREADS\n          value: \"2\"", "- name: GRADMESH_THREADS\n          value: \"2\"",
       kJob + "train.toml sets train.threads = 0 and GRADMESH_NUM_THREADS is no literal count"},
      {"", "- name: GRADMESH_NUM_THREADS", "- name: OPENBLAS_NUM_THREADS\n          value: \"2\"\n        - name: GRADMESH_NUM_THREADS",
       kJob + "sets OPENBLAS_NUM_THREADS"},
      // guaranteed-qos (limits render before requests)
      {"kind: Job", "memory: 8Gi", "memory: 16Gi",
       kJob + "memory request 8Gi and limit 16Gi must be set and equal (Guaranteed QoS)"},
      {"kind: StatefulSet", "cpu: 500m", "cpu: \"1\"", "StatefulSet/gradmesh-redis container redis: cpu request 500m and limit 1"},
      // shm-budget
      {"kind: Job", "medium: Memory\n          sizeLimit: 1Gi", "medium: Memory",
       "Job/gradmesh-train: the memory-backed emptyDir shm has no sizeLimit"},
      {"", "gradmesh.dev/memory-working-set: 7Gi", "gradmesh.dev/memory-working-set: 6Gi",
       "Job/gradmesh-train: shm's 1Gi + gradmesh.dev/memory-working-set 6Gi is not the pod's memory limit (8Gi) [shm-budget]"},
      // no-api-token
      {"kind: Job", "automountServiceAccountToken: false", "automountServiceAccountToken: true",
       "Job/gradmesh-train: must set automountServiceAccountToken: false"},
      // store-durable
      {"", "appendonly yes", "appendonly no", "StatefulSet/gradmesh-redis: Redis runs without its append-only file"},
      {"volumeClaimTemplates", "name: data", "name: redis-data",
       "StatefulSet/gradmesh-redis: Redis's data directory /data is on no PersistentVolumeClaim"},
      {"kind: PodDisruptionBudget", "minAvailable: 1", "minAvailable: 0",
       "PodDisruptionBudget/gradmesh-redis: lets a drain take every member of the store (1) [store-durable]"},
      {"kind: PodDisruptionBudget", "app.kubernetes.io/name: gradmesh-redis", "app.kubernetes.io/name: redis",
       "StatefulSet/gradmesh-redis: no PodDisruptionBudget selects the store's pods"},
      // train-budget
      {"", "minAvailable: 2", "minAvailable: 1",
       "PodDisruptionBudget/gradmesh-train: minAvailable 1 lets a drain take the job below its minimum of 2 nodes"},
      {"", "minAvailable: 2", "maxUnavailable: 1", "PodDisruptionBudget/gradmesh-train: must give minAvailable as a number"},
      // min-version
      {"kind: Job", "min-kubernetes-version: \"1.27\"", "min-kubernetes-version: \"1.26\"",
       "Job/gradmesh-train: uses the Job label batch.kubernetes.io/controller-uid (the run id), which needs Kubernetes "
       "1.27, but states gradmesh.dev/min-kubernetes-version 1.26 [min-version]"},
      {"kind: Job", "min-kubernetes-version: \"1.27\"", "min-kubernetes-version: \"1.25\"",
       "Job/gradmesh-train: uses Job podFailurePolicy (beta, on by default), which needs Kubernetes 1.26"},
      {"kind: Job", "min-kubernetes-version: \"1.27\"", "min-kubernetes-version-x: \"1.27\"",
       "Job/gradmesh-train: states no gradmesh.dev/min-kubernetes-version"},
      // agent-exposure
      {"", "- --token-file=/run/secrets/gradmesh-agent/token", "- --token-file=/tmp/token",
       kJob + "--agent-host 0.0.0.0 without --token-file from a mounted Secret"},
      {"", "- --dashboard-port=8470", "- --dashboard-port=8470\n        - --dashboard-host=0.0.0.0",
       kJob + "--dashboard-host 0.0.0.0: the dashboard has no authentication"},
      // secret-modes
      {"kind: StatefulSet", "defaultMode: 288", "defaultMode: 256",
       "StatefulSet/gradmesh-redis volume redis-password: mode 0400, but under fsGroup 999 the kubelet makes the files 0440"},
      {"kind: Job", "defaultMode: 288", "defaultMode: 292",
       "Job/gradmesh-train volume redis-password: mode 0444: a Secret's files are read-only and the pod's own, 0440 at most"},
      {"kind: StatefulSet", "fsGroup: 999", "supplementalGroups: [999]",
       "StatefulSet/gradmesh-redis volume redis-password: without fsGroup the Secret's files are root's (0440): user 999 "
       "cannot read them"},
      {"kind: Deployment", "fsGroup: 10001", "fsGroup: 10002",
       "Deployment/gradmesh-serve volume serve-token: fsGroup 10002 is not the pod's runAsGroup 10001"},
  });
}

// The monitoring component: its ServiceMonitor sends the agents' token, and
// its network policy opens their port and no other.
TEST_F(KubernetesManifests, TheScrapeUsesTheAgentsTokenAndPortOnly) {
  ASSERT_EQ(render(compose("cpu-monitoring", "overlays/cpu", "components/monitoring")), 0);
  expect_rejected({
      {"kind: ServiceMonitor", "name: gradmesh-agent-token", "name: gradmesh-serve-token",
       "ServiceMonitor/gradmesh-train: scrapes the agents of Job/gradmesh-train container gradmesh without their token: "
       "authorization.credentials must be the Secret gradmesh-agent-token, key token [agent-exposure]"},
      {"kind: ServiceMonitor", "port: metrics", "port: agent",
       "ServiceMonitor/gradmesh-train: endpoint port agent is no port of a Service it selects"},
      {"name: gradmesh-train-metrics", "    ports:\n    - port: 29400\n      protocol: TCP\n", "",
       "NetworkPolicy/gradmesh-train-metrics: admits pods outside the job to every port of Job/gradmesh-train"},
      {"name: gradmesh-train-metrics", "port: 29400", "port: 29401",
       "NetworkPolicy/gradmesh-train-metrics: admits pods outside the job to port 29401"},
  });
}

// The PyTorchJob's workers per pod come from the operator (nprocPerNode).
TEST_F(KubernetesManifests, APyTorchJobsCoresFollowItsWorkersPerPod) {
  ASSERT_EQ(render("pytorchjob"), 0);
  expect_rejected({{"", "nprocPerNode: \"2\"", "nprocPerNode: \"4\"",
                    "PyTorchJob/gradmesh-train Master container pytorch: cpu request 2 and limit 2 must both be 4: "
                    "4 workers x 1 thread (GRADMESH_NUM_THREADS)"}});
}

// Pinned images: the manifests run the version this tree builds
// (deploy/build-image.sh tags it from CMakeLists.txt), in every variant.
TEST_F(KubernetesManifests, TheImageIsThisBuildsVersion) {
  std::smatch m;
  const std::string cmake = read_file(GRADMESH_SOURCE_DIR "/CMakeLists.txt");
  ASSERT_TRUE(std::regex_search(cmake, m, std::regex("project\\(gradmesh VERSION ([0-9.]+)")));
  const std::string image = "image: localhost/gradmesh:" + m[1].str() + "\n";
  for (const std::string variant : {"overlays/cpu", "pytorchjob"}) {
    ASSERT_EQ(render(variant), 0);
    const std::string rendered = read_file(dir_.file("rendered.yaml"));
    size_t images = 0, ours = 0;
    for (size_t at = rendered.find("image: localhost/gradmesh"); at != std::string::npos;
         at = rendered.find("image: localhost/gradmesh", at + 1), ++images)
      ours += rendered.compare(at, image.size(), image) == 0;
    EXPECT_GT(images, 0u) << variant;
    EXPECT_EQ(ours, images) << variant << ": every gradmesh image must be " << image;
  }
}

// `validate.js --rules` is the table docs/kubernetes.md shows.
TEST_F(KubernetesManifests, TheRuleTableIsTheOneTheDocsShow) {
  const CommandResult r = run_shell("node '" + kDeploy + "/validate/validate.js' --rules", dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string docs = read_file(GRADMESH_SOURCE_DIR "/docs/kubernetes.md");
  std::istringstream lines(r.out);
  int rows = 0;
  for (std::string line; std::getline(lines, line); ++rows)
    EXPECT_NE(docs.find(line + "\n"), std::string::npos) << "docs/kubernetes.md lacks the row\n" << line;
  EXPECT_GT(rows, 20);
}

// The Job's own launcher flags (rendered from overlays/cpu; one node, a
// local store and token) put the agent on every address: /metrics answers
// off the loopback with the token and 401 without it; the dashboard stays
// on the loopback; and Prometheus, given the token as a file, scrapes it
// (up == 1) where it is installed.
TEST_F(KubernetesManifests, TheAgentsMetricsAreScrapedWithTheTokenOnly) {
  if (run_shell("command -v curl", "/tmp").exit_code != 0) GTEST_SKIP() << "skipped: curl is not installed";
  ASSERT_EQ(render("overlays/cpu"), 0);
  const CommandResult v = run_shell("node '" + kDeploy + "/validate/validate.js' --launch-help launch.help "
                                    "--train-help train.help --serve-help serve.help --launch-args launch-args.jsonl "
                                    "rendered.yaml", dir_.path());
  ASSERT_EQ(v.exit_code, 0) << v.out;
  std::string line;
  std::getline(std::ifstream(dir_.file("launch-args.jsonl")) >> std::ws, line);
  std::string args = local_launch_args(line, "local-run", false);
  ASSERT_NE(args.find("'--agent-host=0.0.0.0'"), std::string::npos) << args;
  args = std::regex_replace(args, std::regex("'--nnodes=[^']*'"), "'--nnodes=1'");
  std::ofstream(dir_.file("agent-token")) << "k8s-scrape-token\n";
  const bool prometheus = run_shell("command -v prometheus", "/tmp").exit_code == 0;
  // One script: the launcher and Prometheus are its children, stopped on exit.
  const std::string script = std::string("launcher=; prom=; trap 'kill $launcher $prom 2>/dev/null; wait' EXIT\n") +
      "'" GRADMESH_BINARY "'" + args + " -- sleep 60 > launch.log 2>&1 & launcher=$!\n"
      "for i in $(seq 100); do port=$(sed -n 's|.*agent endpoints at http://0.0.0.0:\\([0-9]*\\).*|\\1|p' launch.log);"
      " [ -n \"$port\" ] && break; sleep 0.1; done\n"
      "dash=$(sed -n 's|.*dashboard at http://127.0.0.1:\\([0-9]*\\)/.*|\\1|p' launch.log)\n"
      "host=$(hostname -I 2>/dev/null | awk '{print $1}'); echo \"host=${host:-none}\"; host=${host:-127.0.0.1}\n"
      "code() { curl -s -o /dev/null -w '%{http_code}' \"$@\"; }\n"
      "echo \"no-token=$(code http://$host:$port/metrics)\"\n"
      "echo \"wrong-token=$(code -H 'Authorization: Bearer nope' http://$host:$port/metrics)\"\n"
      "curl -s -H \"Authorization: Bearer $(cat agent-token)\" http://$host:$port/metrics > metrics.txt\n"
      "echo \"dashboard-off-loopback=$(code http://$host:$dash/metrics)\"\n" +
      (prometheus ? "printf 'global: {scrape_interval: 1s}\\nscrape_configs:\\n  - job_name: agent\\n"
                    "    authorization: {credentials_file: %s/agent-token}\\n"
                    "    static_configs: [{targets: [\"%s:%s\"]}]\\n' \"$PWD\" \"$host\" \"$port\" > prometheus.yml\n"
                    "api=127.0.0.1:$(python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); "
                    "print(s.getsockname()[1])')\n"
                    "prometheus --config.file=prometheus.yml --storage.tsdb.path=tsdb --web.listen-address=$api "
                    "> prometheus.log 2>&1 & prom=$!\n"
                    "for i in $(seq 150); do up=$(curl -s \"http://$api/api/v1/query?query=up\");"
                    " case \"$up\" in *'\"value\"'*) break;; esac; sleep 0.2; done\n"
                    "echo \"up=$up\"\n"
                  : "");
  std::ofstream(dir_.file("scrape.sh")) << script;
  const CommandResult r = run_shell("sh scrape.sh", dir_.path());
  const std::string context = r.out + r.err + read_file(dir_.file("launch.log"));
  EXPECT_NE(r.out.find("no-token=401"), std::string::npos) << context;
  EXPECT_NE(r.out.find("wrong-token=401"), std::string::npos) << context;
  EXPECT_NE(read_file(dir_.file("metrics.txt")).find("gradmesh_agent_workers{run_id=\"local-run\"} 2"), std::string::npos)
      << context;
  // Where the machine has an address besides the loopback (a pod always has one).
  if (r.out.find("host=none") == std::string::npos) {
    EXPECT_NE(r.out.find("dashboard-off-loopback=000"), std::string::npos) << "the dashboard has no token\n" << context;
  }
  if (!prometheus) GTEST_SKIP() << "prometheus is not installed: scraped with curl only";
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\"job\":\"agent\"\\},\"value\":\\[[0-9.]+,\"1\"\\]")))
      << context << read_file(dir_.file("prometheus.log"));
}

}  // namespace
}  // namespace gradmesh::testing
