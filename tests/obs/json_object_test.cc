// Every JSON line gradmesh writes parses, whatever numbers and text it
// carries: metrics lines (JsonlWriter) and the objects behind them.
#include "gradmesh/obs/json_object.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gradmesh/core/error.h"
#include "gradmesh/obs/jsonl_writer.h"
#include "support/temp_dir.h"

namespace gradmesh::obs {
namespace {

std::vector<nlohmann::ordered_json> parse_lines(const std::string& text) {
  std::vector<nlohmann::ordered_json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    EXPECT_TRUE(nlohmann::json::accept(line)) << "not JSON: " << line;
    if (nlohmann::json::accept(line)) lines.push_back(nlohmann::ordered_json::parse(line));
  }
  return lines;
}

TEST(JsonlWriter, EveryLineParsesWhateverItCarries) {
  gradmesh::testing::TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  {
    JsonlWriter metrics(path);
    metrics.write(JsonObject()
                      .add("type", "step")
                      .add("loss", std::nan(""))
                      .add("grad_norm", std::numeric_limits<double>::infinity())
                      .add("lr", -std::numeric_limits<double>::infinity())
                      .add("step", int64_t{9'007'199'254'740'993})  // 2^53 + 1: not a double
                      .add("wall_time", 0.1234567890123456)
                      .add("ok", true));
    // A message quoting what a user wrote: a file name in Latin-1, control characters.
    metrics.write(JsonObject().add("message", std::string("caf\xe9 \x01\x1f tab\t \"q\" \\ \x7f \xf0\x9f\x98")));
    metrics.write(JsonObject().add(std::string("k\xff\n"), "v"));
  }
  const std::vector<nlohmann::ordered_json> lines = parse_lines(gradmesh::testing::read_file(path));
  ASSERT_EQ(lines.size(), 3u);

  // Non-finite numbers become null; integers and doubles survive exactly.
  EXPECT_TRUE(lines[0].at("loss").is_null());
  EXPECT_TRUE(lines[0].at("grad_norm").is_null());
  EXPECT_TRUE(lines[0].at("lr").is_null());
  EXPECT_EQ(lines[0].at("step").get<int64_t>(), 9'007'199'254'740'993);
  EXPECT_EQ(lines[0].at("wall_time").get<double>(), 0.1234567890123456);
  EXPECT_EQ(lines[0].at("ok"), true);
  // Fields keep their order: a reader sees the line's type first.
  EXPECT_EQ(lines[0].begin().key(), "type");

  // Bytes that are not UTF-8 become U+FFFD; everything else is kept.
  EXPECT_EQ(lines[1].at("message").get<std::string>(),
            "caf\xef\xbf\xbd \x01\x1f tab\t \"q\" \\ \x7f \xef\xbf\xbd");
  EXPECT_EQ(lines[2].begin().key(), "k\xef\xbf\xbd\n");
}

TEST(JsonObject, AddingAKeyAgainReplacesItsValueInPlace) {
  const std::string text = JsonObject().add("a", 1).add("b", 2).add("a", "three").str();
  EXPECT_EQ(text, R"({"a":"three","b":2})");
  EXPECT_EQ(JsonObject().str(), "{}");
}

TEST(JsonlWriter, FailedWriteIsAnIoErrorNamingTheFile) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  JsonlWriter full("/dev/full");  // every write fails with ENOSPC
  try {
    full.write(JsonObject().add("type", "step"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_EQ(std::string(e.what()).rfind("/dev/full: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace gradmesh::obs
