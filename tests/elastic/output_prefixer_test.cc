// LinePrefixer: whole prefixed lines out, raw lines to the log, in process.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>

#include <gtest/gtest.h>

#include "gradmesh/elastic/output_prefixer.h"
#include "support/temp_dir.h"

namespace gradmesh::elastic {
namespace {

using testing::read_file;
using testing::TempDir;

class PrefixerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    out_fd_ = ::open(dir_.file("out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    log_fd_ = ::open(dir_.file("log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(out_fd_, 0);
    ASSERT_GE(log_fd_, 0);
  }
  void TearDown() override {
    ::close(out_fd_);
    ::close(log_fd_);
  }
  std::string out() const { return read_file(dir_.file("out")); }
  std::string log() const { return read_file(dir_.file("log")); }

  TempDir dir_;
  int out_fd_ = -1, log_fd_ = -1;
};

TEST_F(PrefixerTest, WritesOnlyCompleteLines) {
  LinePrefixer p("[rank 3]: ", out_fd_, log_fd_);
  p.feed("hel");
  EXPECT_EQ(out(), "") << "a partial line must wait for its newline";
  p.feed("lo\nwor");
  EXPECT_EQ(out(), "[rank 3]: hello\n");
  p.feed("ld\n\nlast");
  EXPECT_EQ(out(), "[rank 3]: hello\n[rank 3]: world\n[rank 3]: \n");
  p.finish();
  EXPECT_EQ(out(), "[rank 3]: hello\n[rank 3]: world\n[rank 3]: \n[rank 3]: last\n");
  EXPECT_EQ(log(), "hello\nworld\n\nlast\n");
  p.finish();  // nothing pending: no extra line
  EXPECT_EQ(log(), "hello\nworld\n\nlast\n");
}

TEST_F(PrefixerTest, TwoStreamsShareTheLogLineByLine) {
  LinePrefixer out_stream("[rank 0]: ", out_fd_, log_fd_);
  LinePrefixer err_stream("[rank 0]: ", out_fd_, log_fd_);
  out_stream.feed("out-a");
  err_stream.feed("err-b\n");
  out_stream.feed("\n");
  EXPECT_EQ(log(), "err-b\nout-a\n") << "interleaved streams must not split each other's lines";
}

TEST_F(PrefixerTest, OverlongLinesAreSplitNotBuffered) {
  LinePrefixer p("> ", out_fd_, -1);
  const std::string big(LinePrefixer::kMaxLine + 10, 'x');
  p.feed(big);
  EXPECT_EQ(out(), "> " + std::string(LinePrefixer::kMaxLine, 'x') + "\n");
  p.finish();
  EXPECT_EQ(out(), "> " + std::string(LinePrefixer::kMaxLine, 'x') + "\n> xxxxxxxxxx\n");
}

TEST(WriteFully, SurvivesAClosedReader) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  signal(SIGPIPE, SIG_IGN);
  write_fully(fds[1], "nobody reads this\n");  // EPIPE: dropped, no throw, no hang
  signal(SIGPIPE, SIG_DFL);
  ::close(fds[1]);
}

}  // namespace
}  // namespace gradmesh::elastic
