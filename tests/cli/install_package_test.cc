// The installed package as a program outside this tree meets it: `cmake
// --install` of this build into a fresh prefix; examples/custom_model built
// against it with find_package(gradmesh) and trained on 2 workers under the
// installed `gradmesh launch`; a one-file program built with nothing but
// `pkg-config --cflags --libs gradmesh`.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/config.h"
#include "run_command.h"

namespace gradmesh::testing {
namespace {

namespace fs = std::filesystem;

// GRADMESH_BINARY is the build's top-level output: its directory is the build directory.
const fs::path kBuildDir = fs::path(GRADMESH_BINARY).parent_path();

// A value this build's CMake cache holds ("" when absent).
std::string cache_value(const std::string& key) {
  std::ifstream in(kBuildDir / "CMakeCache.txt");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return line.substr(line.find('=') + 1);
  return "";
}

std::string shell_quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// The compiler this build used, so the consumer's objects match the library's.
std::string cxx_compiler() {
  const std::string cxx = cache_value("CMAKE_CXX_COMPILER");
  return cxx.empty() ? "c++" : cxx;
}

// Where GNUInstallDirs put the library under the prefix: lib, unless the build was configured for /usr.
std::string install_libdir() {
  const std::string libdir = cache_value("CMAKE_INSTALL_LIBDIR");
  return libdir.empty() ? "lib" : libdir;
}

// Installs this build under <dir>/prefix; every command is bounded by timeout(1).
struct Installed {
  TempDir dir;
  fs::path prefix = fs::path(dir.path()) / "prefix";
  fs::path libdir = prefix / install_libdir();
  CommandResult result = run_shell(
      "timeout 120 cmake --install " + shell_quoted(kBuildDir) + " --prefix " + shell_quoted(prefix), dir.path());
};

// FNV-1a over the tensors' bytes in file order: custom_model's weights fingerprint.
uint64_t fingerprint(const checkpoint::SafetensorsFile& file) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const checkpoint::NamedTensor& t : file.tensors) {
    const auto* bytes = static_cast<const unsigned char*>(t.tensor.raw());
    for (size_t i = 0; i < t.tensor.nbytes(); ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  }
  return hash;
}

// Every match of `pattern` in `text`, first capture group.
std::vector<std::string> captures(const std::string& text, const std::string& pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.push_back((*it)[1].str());
  return out;
}

TEST(InstallPackage, InstallsHeadersLibraryExecutableAndPackageFilesButNoTests) {
  Installed in;
  ASSERT_EQ(in.result.exit_code, 0) << in.result.out << in.result.err;
  for (const fs::path& p :
       {in.prefix / "include/gradmesh/gradmesh.h", in.prefix / "include/gradmesh/config.h",
        in.prefix / "include/gradmesh/nn/module.h", in.prefix / "include/gradmesh/parallel/gradient_reducer.h",
        in.libdir / "libgradmesh.a", in.prefix / "bin/gradmesh", in.libdir / "cmake/gradmesh/gradmeshConfig.cmake",
        in.libdir / "cmake/gradmesh/gradmeshConfigVersion.cmake", in.libdir / "cmake/gradmesh/gradmeshTargets.cmake",
        in.libdir / "pkgconfig/gradmesh.pc"})
    EXPECT_TRUE(fs::exists(p)) << p << " was not installed";
  for (const auto& entry : fs::recursive_directory_iterator(in.prefix)) {
    const std::string name = entry.path().filename().string();
    EXPECT_NE(name.rfind("test_", 0), 0u) << "a test was installed: " << entry.path();
    EXPECT_EQ(entry.path().string().find("/compat/"), std::string::npos)
        << "the build-time Gloo stand-in would shadow a real Gloo header: " << entry.path();
  }
  EXPECT_FALSE(fs::exists(in.prefix / "include/gradmesh/cli"))
      << "the executable's own headers are not the library's";
  // Only what the umbrella header reaches: not the trainer, the launcher or a backend's internals.
  for (const char* internal : {"train", "elastic", "serve", "comm/gloo", "comm/mpi", "bench", "scaling"})
    EXPECT_FALSE(fs::exists(in.prefix / "include/gradmesh" / internal)) << internal << " was installed";
  EXPECT_TRUE(fs::exists(in.prefix / "include/gradmesh/parallel/data_parallel.h"));

  // The umbrella header reaches no third-party header: a consumer needs none of their -dev packages to compile.
  const fs::path include = in.prefix / "include";
  const CommandResult deps = run_shell(cxx_compiler() + " -std=c++20 -M -I " + shell_quoted(include) + " " +
                                           shell_quoted(include / "gradmesh/gradmesh.h"),
                                       in.dir.path());
  ASSERT_EQ(deps.exit_code, 0) << deps.err;
  for (const char* heavy : {"nlohmann", "toml++", "/gloo/", "hiredis", "mpi.h", "CLI/", "xxhash", "zlib.h"})
    EXPECT_EQ(deps.out.find(heavy), std::string::npos) << "gradmesh/gradmesh.h pulls in " << heavy;
}

TEST(InstallPackage, CustomModelBuiltWithFindPackageTrainsOnTwoWorkersToIdenticalWeights) {
#if GRADMESH_SANITIZE
  GTEST_SKIP() << "a sanitizer build's archive needs the sanitizer runtime at link time; the Release run covers this";
#endif
  Installed in;
  ASSERT_EQ(in.result.exit_code, 0) << in.result.out << in.result.err;
  const fs::path build = fs::path(in.dir.path()) / "custom_model";
  const CommandResult configure =
      run_shell("timeout 300 cmake -S " + shell_quoted(fs::path(GRADMESH_SOURCE_DIR) / "examples/custom_model") +
                    " -B " + shell_quoted(build) + " -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=" +
                    shell_quoted(fs::path(cxx_compiler())) + " -DCMAKE_PREFIX_PATH=" + shell_quoted(in.prefix),
                in.dir.path());
  ASSERT_EQ(configure.exit_code, 0) << configure.out << configure.err;
  const CommandResult compile = run_shell("timeout 300 cmake --build " + shell_quoted(build), in.dir.path());
  ASSERT_EQ(compile.exit_code, 0) << compile.out << compile.err;

  const fs::path weights = fs::path(in.dir.path()) / "weights.safetensors";
  const CommandResult r = run_shell("timeout 300 " + shell_quoted(in.prefix / "bin/gradmesh") +
                                        " launch --nproc-per-node 2 -- " + shell_quoted(build / "custom_model") +
                                        " --steps 60 --log-every 10 --out " + shell_quoted(weights),
                                    in.dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  const std::vector<std::string> losses = captures(r.out, R"(\[rank 0\]: step \d+/60  loss ([0-9.]+))");
  ASSERT_EQ(losses.size(), 6u) << r.out;
  EXPECT_LT(std::stod(losses.back()), std::stod(losses.front())) << r.out;
  const std::vector<std::string> accuracy = captures(r.out, R"(\[rank 0\]: test accuracy ([0-9.]+))");
  ASSERT_EQ(accuracy.size(), 1u) << r.out;
  EXPECT_GT(std::stod(accuracy[0]), 0.5) << "10 classes: chance is 0.1";

  // Both replicas ended bit-identical, and the file rank 0 saved holds exactly those weights.
  const std::vector<std::string> rank0 = captures(r.out, R"(\[rank 0\]: rank 0 weights fingerprint ([0-9a-f]{16}))");
  const std::vector<std::string> rank1 = captures(r.out, R"(\[rank 1\]: rank 1 weights fingerprint ([0-9a-f]{16}))");
  ASSERT_EQ(rank0.size(), 1u) << r.out;
  ASSERT_EQ(rank1.size(), 1u) << r.out;
  EXPECT_EQ(rank0[0], rank1[0]);
  ASSERT_TRUE(fs::exists(weights)) << r.out;
  const checkpoint::SafetensorsFile file = checkpoint::read_safetensors(weights.string());
  ASSERT_NE(file.find("block.fc1.weight"), nullptr);
  ASSERT_NE(file.find("head.bias"), nullptr);
  EXPECT_EQ(std::stoull(rank0[0], nullptr, 16), fingerprint(file));
}

// The .pc alone compiles and links a program that reaches every dependency
// (BLAS, safetensors, IDX/zlib, stores, every process-group backend).
constexpr const char* kPkgConfigProgram = R"(#include <gradmesh/gradmesh.h>

#include <cstdio>

namespace gm = gradmesh;

int main(int argc, char** argv) {
  gm::nn::MlpSpec spec;
  spec.in_features = 4;
  spec.hidden = {8};
  spec.classes = 3;
  gm::nn::Model model(gm::nn::build_mlp(spec), 0);
  const gm::autograd::Variable loss = gm::autograd::cross_entropy(
      model.forward(gm::autograd::Variable(gm::Tensor::full({2, 4}, 0.5f))), {0, 2});
  model.zero_grad();
  model.backward(loss);
  auto adamw = gm::optim::make_adamw({gm::optim::ParamGroup{0, model.num_parameters(), 0.0f}}, {});
  adamw->step(model.flat_params().data(), model.flat_grads().data(), 1e-3f);
  std::vector<gm::checkpoint::NamedTensor> tensors;
  for (auto& [name, tensor] : model.named_parameters()) tensors.push_back({name, tensor});
  gm::checkpoint::write_safetensors(argv[1], tensors);
  if (argc > 2) gm::data::read_idx(argv[2]);
  if (gm::comm::launched_as_worker()) gm::comm::init_process_group_from_environment();
  std::printf("gradmesh %s: %zu tensors\n", GRADMESH_VERSION,
              gm::checkpoint::read_safetensors(argv[1]).tensors.size());
  return 0;
}
)";

TEST(InstallPackage, PkgConfigFlagsAloneBuildAndLinkAProgram) {
#if GRADMESH_SANITIZE
  GTEST_SKIP() << "a sanitizer build's archive needs the sanitizer runtime at link time; the Release run covers this";
#endif
  Installed in;
  ASSERT_EQ(in.result.exit_code, 0) << in.result.out << in.result.err;
  in.dir.write("program.cc", kPkgConfigProgram);
  const std::string pkg_config = "PKG_CONFIG_PATH=" + shell_quoted(in.libdir / "pkgconfig") + " pkg-config";
  const CommandResult version = run_shell(pkg_config + " --modversion gradmesh", in.dir.path());
  ASSERT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out, std::string(GRADMESH_VERSION) + "\n");
  const CommandResult compile = run_shell("timeout 300 " + cxx_compiler() +
                                              " -std=c++20 program.cc -o program $(" + pkg_config +
                                              " --cflags --libs gradmesh)",
                                          in.dir.path());
  ASSERT_EQ(compile.exit_code, 0) << compile.out << compile.err;
  const CommandResult run = run_shell("./program weights.safetensors", in.dir.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "gradmesh " GRADMESH_VERSION ": 4 tensors\n");
}

}  // namespace
}  // namespace gradmesh::testing
