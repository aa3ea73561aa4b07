// write_file_atomically: the old file survives a failed write, no temporary
// file is left behind either way, and nothing at a guessable name next to the
// target is written through.
#include "gradmesh/core/atomic_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh {
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
  write_file_atomically(path("model.bin"), std::string_view("old weights"));
  EXPECT_THROW(write_file_atomically(path("model.bin"),
                                     [](std::FILE* out) {
                                       std::string big(1 << 20, 'x');  // more than the stdio buffer
                                       write_bytes(out, big.data(), big.size());
                                       throw std::runtime_error("simulated crash mid-write");
                                     }),
               std::runtime_error);
  EXPECT_EQ(read_bytes(path("model.bin")), "old weights");
  EXPECT_EQ(listing(), std::vector<std::string>({"model.bin"}));
}

TEST_F(AtomicFileTest, WritesAStringAsItIs) {
  const std::string bytes("a\0b\n", 4);
  write_file_atomically(path("blob"), bytes);
  EXPECT_EQ(read_bytes(path("blob")), bytes);
  write_file_atomically(path("blob"), std::string_view());
  EXPECT_EQ(read_bytes(path("blob")), "");
}

// A writer with a fixed temporary name ("<path>.tmp", as obs::write_text_file
// had) opens whatever sits there: a symlink planted at that name, by another
// user in a shared directory or left by an earlier run, makes it overwrite
// the file the link points to. The temporary file must be created fresh.
TEST_F(AtomicFileTest, LinkAtATemporaryNameIsNotWrittenThrough) {
  scratch_.write("victim", "precious");
  ASSERT_EQ(::symlink(path("victim").c_str(), path("trace.json.tmp").c_str()), 0);
  write_file_atomically(path("trace.json"), std::string_view("{}"));
  EXPECT_EQ(read_bytes(path("victim")), "precious");
  EXPECT_EQ(read_bytes(path("trace.json")), "{}");
}

TEST_F(AtomicFileTest, LinkAtThePathIsReplacedNotFollowed) {
  scratch_.write("victim", "precious");
  ASSERT_EQ(::symlink(path("victim").c_str(), path("report.html").c_str()), 0);
  write_file_atomically(path("report.html"), std::string_view("<html>"));
  EXPECT_EQ(read_bytes(path("victim")), "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(path("report.html")));
  EXPECT_EQ(read_bytes(path("report.html")), "<html>");
}

TEST_F(AtomicFileTest, FailuresAreIoErrorsNamingThePath) {
  const std::string missing_dir = path("no/such/dir/model.safetensors");
  try {
    write_file_atomically(missing_dir, std::string_view("x"));
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
}  // namespace gradmesh
