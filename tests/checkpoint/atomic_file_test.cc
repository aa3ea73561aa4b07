// write_file_atomically: the old file survives a failed write, and no
// temporary file is left behind either way.
#include "gradmesh/checkpoint/atomic_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::checkpoint {
namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return scratch_.file(name); }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  static std::string read_bytes(const std::string& file) { return gradmesh::testing::read_file(file); }

  gradmesh::testing::TempDir scratch_;
  const std::string& dir_ = scratch_.path();
};

TEST_F(AtomicFileTest, WritesNewFileAndReplacesOldOne) {
  write_file_atomically(path("out.txt"), [](std::FILE* out) { std::fputs("first", out); });
  EXPECT_EQ(read_bytes(path("out.txt")), "first");
  write_file_atomically(path("out.txt"), [](std::FILE* out) { write_bytes(out, "second!", 7); });
  EXPECT_EQ(read_bytes(path("out.txt")), "second!");
  EXPECT_EQ(listing(), std::vector<std::string>({"out.txt"}));
}

TEST_F(AtomicFileTest, ThrowingBodyLeavesOldFileIntactAndNoTempFile) {
  write_safetensors(path("model.safetensors"), {{"w", Tensor::from_vector({3}, {1, 2, 3})}});
  const std::string before = read_bytes(path("model.safetensors"));
  ASSERT_FALSE(before.empty());

  EXPECT_THROW(write_file_atomically(path("model.safetensors"),
                                     [](std::FILE* out) {
                                       std::string big(1 << 20, 'x');  // more than the stdio buffer
                                       write_bytes(out, big.data(), big.size());
                                       throw std::runtime_error("simulated crash mid-write");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read_bytes(path("model.safetensors")), before);
  EXPECT_EQ(listing(), std::vector<std::string>({"model.safetensors"}));
  EXPECT_EQ(read_safetensors(path("model.safetensors")).tensors[0].tensor.to_vector(), std::vector<float>({1, 2, 3}));
}

TEST_F(AtomicFileTest, FailuresAreIoErrorsNamingThePath) {
  const std::string missing_dir = path("no/such/dir/model.safetensors");
  try {
    write_safetensors(missing_dir, {{"w", Tensor::full({1}, 1.0f)}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(std::string(e.what()).rfind(missing_dir + ": ", 0), 0u) << e.what();
  }

  // Renaming a file over a directory fails after the body ran: still no temp file.
  std::filesystem::create_directory(path("taken"));
  try {
    write_file_atomically(path("taken"), [](std::FILE* out) { std::fputs("x", out); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("renaming"), std::string::npos) << e.what();
  }
  EXPECT_EQ(listing(), std::vector<std::string>({"taken"}));
}

TEST_F(AtomicFileTest, StreamErrorsInTheBodyAreReported) {
  // The body ignores fwrite results by contract; the stream's error flag
  // carries the failure. Reading a write-only stream sets that flag just as a
  // short write on a full disk would.
  try {
    write_file_atomically(path("x.bin"), [](std::FILE* out) {
      std::fputs("data", out);
      (void)std::fgetc(out);
    });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("writing temporary file"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(listing().empty());
}

}  // namespace
}  // namespace gradmesh::checkpoint
