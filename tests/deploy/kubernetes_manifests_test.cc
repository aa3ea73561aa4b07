// The Kubernetes manifests (deploy/k8s), offline: every variant renders with
// `kubectl kustomize`, every object validates against the Kubernetes API
// schemas and the pods give `gradmesh launch` what it needs
// (deploy/k8s/validate/validate.js, checked against this build's --help);
// broken manifests are rejected; the job's config is one gradmesh accepts;
// and the launcher honours the variables Kubeflow's PyTorchJob sets.
// Skipped, saying why, where kubectl (with kustomize 4 or later), Node.js or
// the validator's packages (scripts/install-deps.sh) are missing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli/run_command.h"
#include "support/temp_dir.h"

namespace gradmesh::testing {
namespace {

const std::string kDeploy = GRADMESH_SOURCE_DIR "/deploy/k8s";

std::string missing_tool() {
  const CommandResult node = run_shell("node --version", "/tmp");
  if (node.exit_code != 0) return "node (Node.js) is not installed";
  if (!std::filesystem::exists(kDeploy + "/validate/node_modules/kubernetes-models"))
    return "deploy/k8s/validate has no node_modules (scripts/install-deps.sh runs npm ci there)";
  const CommandResult kubectl = run_shell("kubectl version --client", "/tmp");
  if (kubectl.exit_code != 0) return "kubectl is not installed";
  std::smatch m;
  const std::regex version("Kustomize Version: v(\\d+)");
  if (!std::regex_search(kubectl.out, m, version) || std::stoi(m[1]) < 4)
    return "kubectl's kustomize is older than v4 (the manifests use its labels and patches fields)";
  return "";
}

class KubernetesManifests : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string missing = missing_tool();
    if (!missing.empty()) GTEST_SKIP() << "skipped: " << missing;
    for (const char* command : {"launch", "train", "serve"}) {
      const CommandResult r = run_gradmesh(std::string(command) + " --help", dir_.path());
      ASSERT_EQ(r.exit_code, 0) << r.err;
      std::ofstream(dir_.file(std::string(command) + ".help")) << r.out;
    }
  }

  // Renders `variant` into rendered.yaml; returns kustomize's exit code.
  int render(const std::string& variant) {
    const CommandResult r = run_shell("kubectl kustomize '" + kDeploy + "/" + variant + "'", dir_.path());
    EXPECT_EQ(r.err, "") << variant;
    std::ofstream(dir_.file("rendered.yaml")) << r.out;
    return r.exit_code;
  }

  CommandResult validate(const std::string& file = "rendered.yaml") {
    return run_shell("node '" + kDeploy + "/validate/validate.js' --launch-help launch.help --train-help train.help "
                     "--serve-help serve.help " + file, dir_.path());
  }

  // rendered.yaml with `from` replaced by `to` (once, which must be found), as broken.yaml.
  void break_rendering(const std::string& from, const std::string& to) {
    std::string text = read_file(dir_.file("rendered.yaml"));
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(dir_.file("broken.yaml")) << text;
  }

  TempDir dir_;
};

TEST_F(KubernetesManifests, EveryVariantRendersAndValidates) {
  for (const char* variant : {"overlays/cpu", "overlays/gpu", "pytorchjob"}) {
    ASSERT_EQ(render(variant), 0) << variant;
    const CommandResult r = validate();
    EXPECT_EQ(r.exit_code, 0) << variant << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("objects valid"), std::string::npos) << r.out;
  }
  ASSERT_EQ(render("overlays/gpu"), 0);
  EXPECT_NE(read_file(dir_.file("rendered.yaml")).find("nvidia.com/gpu: \"2\""), std::string::npos);
}

TEST_F(KubernetesManifests, BrokenManifestsAreRejectedWithTheReason) {
  ASSERT_EQ(render("overlays/cpu"), 0);
  const struct {
    const char* from;
    const char* to;
    const char* reason;
  } cases[] = {
      {"--agent-port=29400", "--agent-prt=29400", "gradmesh launch has no flag --agent-prt"},
      {"completions: 4", "completions: four", "must be integer"},
      {"name: GRADMESH_REDIS_PASSWORD_FILE", "name: GRADMESH_REDIS_PASSWORD", "holds a literal value"},
      {"--rdzv-id=$(JOB_UID)", "--rdzv-id=$(POD_INDEX)", "$(POD_INDEX)"},
      {"terminationGracePeriodSeconds: 90", "terminationGracePeriodSeconds: 30", "must exceed --grace-period"},
      {"--resume=auto", "--epochs-nope", "gradmesh train has no flag --epochs-nope"},
      {"completionMode: Indexed", "completionMode: NonIndexed", "must be Indexed"},
  };
  for (const auto& c : cases) {
    break_rendering(c.from, c.to);
    const CommandResult r = validate("broken.yaml");
    EXPECT_EQ(r.exit_code, 1) << c.from << " -> " << c.to;
    EXPECT_NE(r.out.find(c.reason), std::string::npos) << c.from << " -> " << c.to << "\n" << r.out;
  }
}

// The launcher's own checks on the pods' arguments (flag combinations the
// schema cannot know, such as --node-rank with an elastic --nnodes): each
// launcher's flags run for real, with the store, the token and the $(VARS)
// replaced by local stand-ins. A launcher that accepts them waits for the
// other nodes and times out (exit 1); a usage error would exit 2.
TEST_F(KubernetesManifests, TheLauncherAcceptsThePodsFlags) {
  std::ofstream(dir_.file("agent-token")) << "local-token\n";
  int checked = 0;
  for (const char* variant : {"overlays/cpu", "pytorchjob"}) {
    ASSERT_EQ(render(variant), 0) << variant;
    std::filesystem::remove(dir_.file("launch-args.jsonl"));
    const CommandResult v = run_shell("node '" + kDeploy + "/validate/validate.js' --launch-help launch.help "
                                      "--train-help train.help --serve-help serve.help --launch-args launch-args.jsonl "
                                      "rendered.yaml", dir_.path());
    ASSERT_EQ(v.exit_code, 0) << v.out;
    std::ifstream lines(dir_.file("launch-args.jsonl"));
    std::string line;
    while (std::getline(lines, line)) {
      std::string args;
      for (std::smatch m; std::regex_search(line, m, std::regex("\"((?:[^\"\\\\]|\\\\.)*)\"")); line = m.suffix()) {
        std::string arg = m[1];
        if (arg.rfind("--rdzv-endpoint=", 0) == 0) arg = "--rdzv-endpoint=file://" + dir_.file("store");
        if (arg.rfind("--token-file=", 0) == 0) arg = "--token-file=" + dir_.file("agent-token");
        if (arg.rfind("--agent-port=", 0) == 0) arg = "--agent-port=0";
        arg = std::regex_replace(arg, std::regex("\\$\\([A-Z_]+\\)"), "local-" + std::to_string(checked));
        args += " '" + arg + "'";
      }
      // What Kubeflow's operator sets on the master (the Indexed Job sets none).
      const std::string pet = std::string(variant) == "pytorchjob" ? "PET_NNODES=4 PET_NODE_RANK=0 PET_NPROC_PER_NODE=2 " : "";
      const CommandResult r =
          run_shell(pet + "'" GRADMESH_BINARY "'" + args + " --join-timeout=1 -- true", dir_.path());
      EXPECT_EQ(r.exit_code, 1) << variant << ":" << args << "\n" << r.err;
      EXPECT_NE(r.err.find("rendezvous"), std::string::npos) << r.err;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3) << "the Job's launcher and the PyTorchJob's two";
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
