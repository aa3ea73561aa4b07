// What the Kubernetes manifest tests share: rendering a variant with
// `kubectl kustomize`, running the validator (deploy/k8s/validate) on it with
// this build's --help texts, and breaking a rendering the way a hand edit
// could. Skips, saying why, where kubectl (with kustomize 4 or later),
// Node.js or the validator's packages (scripts/install-deps.sh) are missing.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "support/temp_dir.h"

namespace gradmesh::testing {

inline const std::string kDeploy = GRADMESH_SOURCE_DIR "/deploy/k8s";

inline std::string missing_manifest_tool() {
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

// A rendering broken once: `from` becomes `to` at its first occurrence after
// `after` (from the start when empty); the validator must reject it with a
// line that holds `reason`.
struct BrokenManifest {
  std::string after;
  std::string from;
  std::string to;
  std::string reason;
};

class KubernetesManifests : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string missing = missing_manifest_tool();
    if (!missing.empty()) GTEST_SKIP() << "skipped: " << missing;
    for (const char* command : {"launch", "train", "serve"}) {
      const CommandResult r = run_gradmesh(std::string(command) + " --help", dir_.path());
      ASSERT_EQ(r.exit_code, 0) << r.err;
      std::ofstream(dir_.file(std::string(command) + ".help")) << r.out;
    }
  }

  // Renders `variant` (under deploy/k8s, or absolute) into rendered.yaml;
  // returns kustomize's exit code.
  int render(const std::string& variant) {
    const std::string path = variant.front() == '/' ? variant : kDeploy + "/" + variant;
    const CommandResult r = run_shell("kubectl kustomize '" + path + "'", dir_.path());
    EXPECT_EQ(r.err, "") << variant;
    std::ofstream(dir_.file("rendered.yaml")) << r.out;
    return r.exit_code;
  }

  // A kustomization in the scratch directory named `name`: the overlay
  // `overlay` with the component `component` (both under deploy/k8s), as
  // docs/kubernetes.md tells users to write it (kustomize takes only
  // relative paths). Returns its directory, for render().
  std::string compose(const std::string& name, const std::string& overlay, const std::string& component) {
    const std::string dir = dir_.file(name);
    std::filesystem::create_directories(dir);
    const std::string k8s = std::filesystem::relative(kDeploy, dir).string();
    std::ofstream(dir + "/kustomization.yaml") << "resources:\n  - " << k8s << "/" << overlay << "\n"
                                               << "components:\n  - " << k8s << "/" << component << "\n";
    return dir;
  }

  CommandResult validate(const std::string& file = "rendered.yaml") {
    return run_shell("node '" + kDeploy + "/validate/validate.js' --launch-help launch.help --train-help train.help "
                     "--serve-help serve.help " + file, dir_.path());
  }

  // rendered.yaml with `from` replaced by `to` (once, which must be found;
  // the first after `after` when given), as broken.yaml.
  void break_rendering(const std::string& from, const std::string& to, const std::string& after = "") {
    std::string text = read_file(dir_.file("rendered.yaml"));
    const size_t start = text.find(after);
    ASSERT_NE(start, std::string::npos) << after;
    const size_t at = text.find(from, start);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(dir_.file("broken.yaml")) << text;
  }

  // Each case's broken rendering fails validation, naming its reason.
  void expect_rejected(const std::vector<BrokenManifest>& cases) {
    for (const BrokenManifest& c : cases) {
      break_rendering(c.from, c.to, c.after);
      const CommandResult r = validate("broken.yaml");
      EXPECT_EQ(r.exit_code, 1) << c.from << " -> " << c.to;
      EXPECT_NE(r.out.find(c.reason), std::string::npos) << c.from << " -> " << c.to << "\n" << r.out;
    }
  }

  // One launcher's arguments (a line of --launch-args' JSON) for a local
  // run: quoted for the shell, with the token, the agent's port and the
  // $(VARS) replaced by local stand-ins, and the store by a local file store
  // unless `keep_store`.
  std::string local_launch_args(std::string line, const std::string& stand_in, bool keep_store) {
    std::string args;
    for (std::smatch m; std::regex_search(line, m, std::regex("\"((?:[^\"\\\\]|\\\\.)*)\"")); line = m.suffix()) {
      std::string arg = m[1];
      if (!keep_store && arg.rfind("--rdzv-endpoint=", 0) == 0) arg = "--rdzv-endpoint=file://" + dir_.file("store");
      if (arg.rfind("--token-file=", 0) == 0) arg = "--token-file=" + dir_.file("agent-token");
      if (arg.rfind("--agent-port=", 0) == 0) arg = "--agent-port=0";
      arg = std::regex_replace(arg, std::regex("\\$\\([A-Z_]+\\)"), stand_in);
      args += " '" + arg + "'";
    }
    return args;
  }

  TempDir dir_;
};

}  // namespace gradmesh::testing
