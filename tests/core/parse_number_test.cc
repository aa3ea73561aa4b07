#include <gtest/gtest.h>

#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh {
namespace {

TEST(ParseNumber, IntegersAreTheWholeTextInDecimal) {
  EXPECT_EQ(try_parse_int("42"), 42);
  EXPECT_EQ(try_parse_int("-7"), -7);
  EXPECT_EQ(try_parse_int("0"), 0);
  EXPECT_EQ(try_parse_int("007"), 7);  // leading zeros are decimal, never octal
  EXPECT_EQ(try_parse_int("9223372036854775807"), kInt64Max);
  EXPECT_EQ(try_parse_int("-9223372036854775808"), kInt64Min);
  for (const char* bad : {"", " 1", "1 ", "\t1", "1\n", "+1", "0x10", "0X10", "1e3", "1.0", "12abc", "-", "--1",
                          "9223372036854775808", "-9223372036854775809", "99999999999999999999"})
    EXPECT_EQ(try_parse_int(bad), std::nullopt) << "'" << bad << "'";
}

TEST(ParseNumber, IntegersOutsideTheRangeAreRefused) {
  EXPECT_EQ(try_parse_int("1", 1, 65535), 1);
  EXPECT_EQ(try_parse_int("65535", 1, 65535), 65535);
  EXPECT_EQ(try_parse_int("0", 1, 65535), std::nullopt);
  EXPECT_EQ(try_parse_int("65536", 1, 65535), std::nullopt);
  EXPECT_EQ(try_parse_int("-1", 0, 10), std::nullopt);
}

TEST(ParseNumber, IntegerErrorsNameWhatTheTextAndTheRange) {
  try {
    parse_int("70000", "--master-port", 0, 65535);
    FAIL() << "70000 accepted as a port";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_STREQ(e.what(), "--master-port: expected a decimal integer in [0, 65535], got '70000'");
  }
  try {
    parse_int("x", "model.hidden", 1, kInt64Max, ErrorKind::kConfig);
    FAIL() << "x accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "model.hidden: expected a decimal integer >= 1, got 'x'");
  }
  EXPECT_EQ(parse_int("-3", "offset", kInt64Min, kInt64Max), -3);
}

TEST(ParseNumber, RealsAreFiniteAndTheWholeText) {
  EXPECT_EQ(try_parse_double("1.5", 0, 10), 1.5);
  EXPECT_EQ(try_parse_double("-2", -10, 10), -2.0);
  EXPECT_EQ(try_parse_double("1e3", 0, 1e4), 1000.0);
  EXPECT_EQ(try_parse_double(".5", 0, 1), 0.5);
  for (const char* bad : {"", " 1", "1 ", "+1", "inf", "-inf", "infinity", "nan", "NaN", "0x10", "0x1p3", "1e400",
                          "1.5s", "10s", "1,5", "."})
    EXPECT_EQ(try_parse_double(bad, -1e308, 1e308), std::nullopt) << "'" << bad << "'";
}

TEST(ParseNumber, RealErrorsNameWhatTheTextAndTheRange) {
  EXPECT_EQ(try_parse_double("1e300", 0, 604800), std::nullopt);
  EXPECT_EQ(try_parse_double("0", 0.001, 1), std::nullopt);
  try {
    parse_double("1e300", "parallel.timeout_s", 0.001, 604800, ErrorKind::kConfig);
    FAIL() << "1e300 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_STREQ(e.what(), "parallel.timeout_s: expected a finite number in [0.001, 604800], got '1e300'");
  }
}

}  // namespace
}  // namespace gradmesh
