// trainer.json: exact round trip and strict rejection of anything else.
#include "gradmesh/checkpoint/trainer_state.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_fixture.h"
#include "gradmesh/core/error.h"

namespace gradmesh::checkpoint {
namespace {

using testing::trainer_at;

TEST(TrainerState, RoundTripKeepsEveryFieldIncludingFullUint64Seed) {
  const TrainerState state = trainer_at(1234);
  EXPECT_EQ(parse_trainer_state(trainer_state_json(state), "t.json"), state);
}

// Parses `json` (after `edit`) and expects Error(kFormat) naming the source and `field`.
void expect_rejected(const std::function<void(nlohmann::json&)>& edit, const std::string& field,
                     const std::string& also = "") {
  nlohmann::json json = nlohmann::json::parse(trainer_state_json(trainer_at(7)));
  edit(json);
  try {
    parse_trainer_state(json.dump(), "ckpt/trainer.json");
    FAIL() << "accepted " << json.dump();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kFormat);
    const std::string message = e.what();
    EXPECT_NE(message.find("ckpt/trainer.json"), std::string::npos) << message;
    EXPECT_NE(message.find("'" + field + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(also), std::string::npos) << message;
  }
}

TEST(TrainerState, MissingFieldIsNamed) {
  for (const char* field : {"format_version", "step", "epoch", "step_in_epoch", "epoch_position", "seed", "rng_step",
                            "config_hash", "world_size", "generation", "optimizer"}) {
    SCOPED_TRACE(field);
    expect_rejected([&](nlohmann::json& j) { j.erase(field); }, field, "missing");
  }
}

TEST(TrainerState, WrongTypeIsNamed) {
  expect_rejected([](nlohmann::json& j) { j["step"] = "12"; }, "step", "expected an integer");
  expect_rejected([](nlohmann::json& j) { j["epoch"] = 1.5; }, "epoch", "expected an integer");
  expect_rejected([](nlohmann::json& j) { j["seed"] = -1; }, "seed", "unsigned");
  expect_rejected([](nlohmann::json& j) { j["optimizer"] = 3; }, "optimizer", "expected a string");
  expect_rejected([](nlohmann::json& j) { j["config_hash"] = nullptr; }, "config_hash", "expected a string");
}

TEST(TrainerState, BadVersionIsNamed) {
  expect_rejected([](nlohmann::json& j) { j["format_version"] = 2; }, "format_version", "2");
  expect_rejected([](nlohmann::json& j) { j["format_version"] = 0; }, "format_version", "0");
}

TEST(TrainerState, NegativeCountsAndImpossibleValuesAreNamed) {
  expect_rejected([](nlohmann::json& j) { j["step"] = -1; }, "step", "-1");
  expect_rejected([](nlohmann::json& j) { j["epoch_position"] = -5; }, "epoch_position", "-5");
  expect_rejected([](nlohmann::json& j) { j["generation"] = -2; }, "generation", "-2");
  expect_rejected([](nlohmann::json& j) { j["world_size"] = 0; }, "world_size", "0");
  expect_rejected([](nlohmann::json& j) { j["step"] = 18446744073709551615ull; }, "step", "18446744073709551615");
  expect_rejected([](nlohmann::json& j) { j["optimizer"] = ""; }, "optimizer", "empty");
}

TEST(TrainerState, ZeroStageIsOptionalAndCheckedWhenPresent) {
  TrainerState sharded = trainer_at(5);
  sharded.zero_stage = 2;
  EXPECT_EQ(parse_trainer_state(trainer_state_json(sharded), "t.json"), sharded);
  // A trainer.json written before the field existed holds whole optimizer state.
  nlohmann::json older = nlohmann::json::parse(trainer_state_json(sharded));
  older.erase("zero_stage");
  EXPECT_EQ(parse_trainer_state(older.dump(), "t.json").zero_stage, 0);
  expect_rejected([](nlohmann::json& j) { j["zero_stage"] = 4; }, "zero_stage", "4");
  expect_rejected([](nlohmann::json& j) { j["zero_stage"] = "2"; }, "zero_stage", "expected an integer");
}

TEST(TrainerState, RunTotalsAreOptionalAndCheckedWhenPresent) {
  TrainerState resumed = trainer_at(5);
  resumed.samples = 640;
  resumed.checkpoints_saved = 4;
  resumed.checkpoints_failed = 2;
  EXPECT_EQ(parse_trainer_state(trainer_state_json(resumed), "t.json"), resumed);
  // A trainer.json written before the fields existed: samples unknown, no saves counted.
  nlohmann::json older = nlohmann::json::parse(trainer_state_json(resumed));
  for (const char* field : {"samples", "checkpoints_saved", "checkpoints_failed"}) older.erase(field);
  const TrainerState parsed = parse_trainer_state(older.dump(), "t.json");
  EXPECT_EQ(parsed.samples, -1);
  EXPECT_EQ(parsed.checkpoints_saved, 0);
  EXPECT_EQ(parsed.checkpoints_failed, 0);
  expect_rejected([](nlohmann::json& j) { j["samples"] = -3; }, "samples", "-3");
  expect_rejected([](nlohmann::json& j) { j["checkpoints_failed"] = "1"; }, "checkpoints_failed", "expected an integer");
}

TEST(TrainerState, UnknownFieldIsNamed) {
  expect_rejected([](nlohmann::json& j) { j["learning_rate"] = 0.1; }, "learning_rate", "not a trainer.json field");
}

TEST(TrainerState, NotJsonOrNotAnObjectIsAFormatError) {
  for (const char* text : {"", "{\"step\": ", "not json", "[1, 2]", "42"}) {
    SCOPED_TRACE(text);
    try {
      parse_trainer_state(text, "ckpt/trainer.json");
      FAIL() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kFormat);
      EXPECT_NE(std::string(e.what()).find("ckpt/trainer.json"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace gradmesh::checkpoint
