// TOML -> Config. This file only turns toml++ nodes into typed KeyValues and
// reports where they came from; what each key accepts is in config_schema.cc.
#include "gradmesh/train/config.h"

#include <toml++/toml.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "gradmesh/core/error.h"
#include "gradmesh/train/config_schema.h"

namespace gradmesh::train {
namespace {

[[noreturn]] void config_error(const std::string& where, const std::string& what) {
  throw_error(ErrorKind::kConfig, where, what);
}

std::string node_phrase(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    case toml::node_type::none: break;
  }
  return "nothing";
}

std::string leaf_of(const std::string& path) { return path.substr(path.rfind('.') + 1); }

// A key of the same name in another section ("train.lr" -> "optim.lr") is the
// likeliest mistake; otherwise the closest spelling.
std::string suggest_key(const std::string& path) {
  std::vector<std::string> paths;
  for (const KeySpec& spec : config_schema()) {
    if (leaf_of(spec.path) == leaf_of(path)) return spec.path;
    paths.push_back(spec.path);
  }
  return closest_name(path, paths);
}

std::string unknown_key_message(const std::string& path) {
  std::string message = "unknown key '" + path + "'";
  std::string hint = suggest_key(path);
  if (!hint.empty()) return message + " (did you mean '" + hint + "'?)";
  if (path.find('.') == std::string::npos) return message + "; keys are written section.key, e.g. optim.lr";
  return message + "; the keys are listed in docs/config.md";
}

std::string section_list() {
  std::string out;
  for (const SectionSpec& section : config_sections()) out += (out.empty() ? "[" : ", [") + section.name + "]";
  return out;
}

// Reads `node` as the key's type into `*out`. Returns "" or the message tail;
// `*suffix` names the failing array entry ("[2]").
std::string read_node(const KeySpec& spec, const toml::node& node, KeyValue* out, std::string* suffix) {
  // A choice key names its choices even when the type is wrong.
  const std::string expected = spec.constraint.choices.empty() ? describe_type(spec.type) : describe_expected(spec);
  const std::string type_error = "expected " + expected + ", got " + node_phrase(node);
  switch (spec.type) {
    case KeyType::kBool:
      if (!node.is_boolean()) return type_error;
      *out = node.as_boolean()->get();
      return "";
    case KeyType::kInt:
      if (!node.is_integer()) return type_error;
      *out = node.as_integer()->get();
      return "";
    case KeyType::kFloat:
      // TOML writes 1 and 1.0 differently; a float key takes either.
      if (node.is_integer()) *out = static_cast<double>(node.as_integer()->get());
      else if (node.is_floating_point()) *out = node.as_floating_point()->get();
      else return type_error;
      return "";
    case KeyType::kString:
      if (!node.is_string()) return type_error;
      *out = node.as_string()->get();
      return "";
    case KeyType::kIntList: {
      const toml::array* array = node.as_array();
      if (array == nullptr) return type_error;
      std::vector<int64_t> list;
      for (size_t i = 0; i < array->size(); ++i) {
        const toml::node& entry = *array->get(i);
        if (!entry.is_integer()) {
          *suffix = "[" + std::to_string(i) + "]";
          return "expected an integer, got " + node_phrase(entry);
        }
        list.push_back(entry.as_integer()->get());
      }
      *out = std::move(list);
      return "";
    }
  }
  return "";
}

// Reads, checks and stores one key. Returns "" or "<key>: expected ..., got ...".
std::string assign(Config& config, const KeySpec& spec, const toml::node& node) {
  KeyValue value;
  std::string suffix;
  std::string problem = read_node(spec, node, &value, &suffix);
  if (problem.empty()) {
    int64_t index = -1;
    problem = check_value(spec, value, &index);
    if (index >= 0) suffix = "[" + std::to_string(index) + "]";
  }
  if (!problem.empty()) return spec.path + suffix + ": " + problem;
  spec.set(config, value);
  return "";
}

bool has_keys_under(const std::string& prefix) {
  for (const KeySpec& spec : config_schema())
    if (spec.path.size() > prefix.size() && spec.path.compare(0, prefix.size() + 1, prefix + ".") == 0) return true;
  return false;
}

struct Problem {
  toml::source_position position;
  std::string message;
};

void read_section(const std::string& section, const toml::table& table, Config& config,
                  std::vector<Problem>& problems) {
  for (auto&& [key, node] : table) {
    std::string path = section + "." + std::string(key.str());
    const KeySpec* spec = find_key(path);
    if (spec == nullptr && node.is_table() && has_keys_under(path)) {
      // A table of keys inside the section: mesh = { dp = 2, pp = 2 } or mesh.dp = 2.
      read_section(path, *node.as_table(), config, problems);
      continue;
    }
    if (spec == nullptr) {
      problems.push_back({key.source().begin, unknown_key_message(path)});
      continue;
    }
    std::string problem = assign(config, *spec, node);
    if (!problem.empty()) problems.push_back({node.source().begin, problem});
  }
}

void read_root(const toml::table& root, Config& config, std::vector<Problem>& problems) {
  std::vector<std::string> section_names;
  for (const SectionSpec& section : config_sections()) section_names.push_back(section.name);
  for (auto&& [key, node] : root) {
    std::string name(key.str());
    if (!is_section(name)) {
      std::string message;
      if (node.is_table() || node.is_array_of_tables()) {
        std::string hint = closest_name(name, section_names);
        message = "unknown section [" + name + "]" + (hint.empty() ? "" : " (did you mean [" + hint + "]?)") +
                  "; the sections are " + section_list();
      } else {
        std::string hint = suggest_key(name);
        message = "unknown key '" + name + "' at the top level: keys belong in a section" +
                  (hint.empty() ? " (" + section_list() + ")" : " (did you mean '" + hint + "'?)");
      }
      problems.push_back({key.source().begin, message});
      continue;
    }
    if (!node.is_table()) {
      problems.push_back({node.source().begin,
                          name + ": expected a table (a [" + name + "] section), got " + node_phrase(node)});
      continue;
    }
    read_section(name, *node.as_table(), config, problems);
  }
}

// parallel.zero and what it cannot be combined with (docs/zero.md).
void check_zero_keys(const Config& config, const std::string& where) {
  const int64_t zero = config.parallel.zero;
  if (zero == 0) return;
  if (config.parallel.comm_dtype != "f32")
    config_error(where, "parallel.comm_dtype: ZeRO (parallel.zero = " + std::to_string(zero) +
                            ") reduce-scatters float32 gradients only, got \"" + config.parallel.comm_dtype +
                            "\"; set comm_dtype = \"f32\" or parallel.zero = 0");
  if (config.elastic.recovery == "in-process")
    config_error(where, "elastic.recovery: \"in-process\" cannot be combined with parallel.zero = " +
                            std::to_string(zero) +
                            ": each rank holds only its shard of the optimizer state, which dies with a failed "
                            "worker; use elastic.recovery = \"restart\" (resumes from the sharded checkpoint) or "
                            "parallel.zero = 0");
  if (zero == 3 && config.parallel.straggler == "rebalance")
    config_error(where, "parallel.straggler: \"rebalance\" with parallel.zero = 3 could leave a rank fewer samples "
                        "than train.accum_steps, and every rank must run every unit's gathers; use "
                        "straggler = \"none\" or parallel.zero <= 2");
}

// parallel.compression and parallel.local_steps: plain data parallelism only.
void check_communication_reduction_keys(const Config& config, const std::string& where) {
  const ParallelConfig& p = config.parallel;
  const bool powersgd = p.compression == "powersgd", local = p.local_steps > 1;
  if (!powersgd && !local) return;
  const std::string what = powersgd ? "parallel.compression = \"powersgd\"" : "parallel.local_steps = " + std::to_string(p.local_steps);
  if (powersgd && local)
    config_error(where, "parallel.compression: \"powersgd\" compresses every step's gradients, and parallel.local_steps = " +
                            std::to_string(p.local_steps) + " exchanges none between synchronisations; choose one "
                            "(compression = \"none\" or local_steps = 1)");
  if (p.zero != 0)
    config_error(where, "parallel.zero: " + what + " needs plain data parallelism (parallel.zero = 0), got " +
                            std::to_string(p.zero));
  if (p.mesh_pp > 1 || p.mesh_tp > 1)
    config_error(where, "parallel.mesh: " + what + " needs a data-parallel-only mesh (pp = 1, tp = 1), got pp = " +
                            std::to_string(p.mesh_pp) + ", tp = " + std::to_string(p.mesh_tp));
  if (p.comm_dtype != "f32")
    config_error(where, "parallel.comm_dtype: " + what + " sends float32, got \"" + p.comm_dtype +
                            "\"; set comm_dtype = \"f32\"");
  if (config.elastic.recovery == "in-process")
    config_error(where, "elastic.recovery: \"in-process\" cannot be combined with " + what +
                            ": each rank's own state (PowerSGD's error feedback, local SGD's diverged parameters) dies "
                            "with a failed worker; use elastic.recovery = \"restart\" (resumes from the checkpoint)");
}

// Rules that involve more than one key; same rules as PyTorch where it has one.
void check_cross_key(const Config& config, const std::string& where) {
  if (config.schedule.kind == "cosine" && config.schedule.min_lr > config.optim.lr)
    config_error(where, "schedule.min_lr: expected a number <= optim.lr (" + number_text(config.optim.lr) +
                            ") for the cosine schedule, got " + number_text(config.schedule.min_lr));
  if (config.optim.name == "sgd" && config.optim.nesterov &&
      (config.optim.momentum <= 0 || config.optim.dampening != 0))
    config_error(where, "optim.nesterov: Nesterov momentum needs optim.momentum > 0 and optim.dampening = 0, got "
                        "momentum " + number_text(config.optim.momentum) + " and dampening " +
                            number_text(config.optim.dampening) + " (set nesterov = false or change them)");
  check_zero_keys(config, where);
  check_communication_reduction_keys(config, where);
}

std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

void apply_override(Config& config, const std::string& text) {
  const std::string where = "--set " + text;
  size_t equals = text.find('=');
  if (equals == std::string::npos || trim(text.substr(0, equals)).empty())
    config_error(where, "expected key=value, e.g. --set optim.lr=0.1");
  std::string path = trim(text.substr(0, equals));
  std::string raw = trim(text.substr(equals + 1));
  const KeySpec* spec = find_key(path);
  if (spec == nullptr) {
    if (is_section(path))
      config_error(where, "'" + path + "' is a section; set one key of it, e.g. " + path + ".<key>=...");
    config_error(where, unknown_key_message(path));
  }
  // The value is TOML (0.1, [256, 256], true, "text"). Anything else, and any
  // unquoted value for a string key (--set model.kind=cnn), is the literal text.
  std::optional<toml::table> parsed;
  try {
    parsed = toml::parse("value = " + raw + "\n", where);
  } catch (const toml::parse_error&) {
    // Not a TOML value: the literal text is used below.
  }
  const toml::node* node = parsed && parsed->size() == 1 ? parsed->get("value") : nullptr;
  toml::value<std::string> literal(raw);
  if (node == nullptr || (spec->type == KeyType::kString && !node->is_string())) node = &literal;
  std::string problem = assign(config, *spec, *node);
  if (!problem.empty()) config_error(where, problem);
}

// Whether the file or an override names a metering key starting with
// `prefix`: until a price is named, every cost shown is marked as computed
// from the example prices (unless metering.example_prices itself is set).
bool metering_key_given(const toml::table& root, const std::vector<std::string>& overrides, const std::string& prefix) {
  if (const toml::table* metering = root["metering"].as_table())
    for (auto&& [key, node] : *metering)
      if (key.str().rfind(prefix, 0) == 0) return true;
  for (const std::string& text : overrides)
    if (trim(text).rfind("metering." + prefix, 0) == 0) return true;
  return false;
}

bool prices_given(const toml::table& root, const std::vector<std::string>& overrides) {
  return metering_key_given(root, overrides, "price_");
}

bool example_prices_given(const toml::table& root, const std::vector<std::string>& overrides) {
  return metering_key_given(root, overrides, "example_prices");
}

}  // namespace

Config parse_config(const std::string& toml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    const toml::source_position& at = e.source().begin;
    config_error(source_name + ":" + std::to_string(at.line) + ":" + std::to_string(at.column),
                 "invalid TOML: " + std::string(e.description()) + " (line " + std::to_string(at.line) +
                     ", column " + std::to_string(at.column) + ")");
  }
  Config config;
  std::vector<Problem> problems;
  read_root(root, config, problems);
  if (!problems.empty()) {
    // Every problem at once, in file order, so one edit fixes them all.
    std::stable_sort(problems.begin(), problems.end(), [](const Problem& a, const Problem& b) {
      return std::pair(a.position.line, a.position.column) < std::pair(b.position.line, b.position.column);
    });
    std::string message;
    for (const Problem& problem : problems)
      message += (message.empty() ? "" : "\n") + source_name + ": " + problem.message;
    config_error("", message);
  }
  for (const std::string& override_text : overrides) apply_override(config, override_text);
  if (prices_given(root, overrides) && !example_prices_given(root, overrides)) config.metering.example_prices = false;
  check_cross_key(config, overrides.empty() ? source_name : source_name + " with --set overrides");
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    config_error("", "cannot open config file " + path + ": it is a directory (pass a .toml file)");
  std::ifstream in(path, std::ios::binary);
  if (!in) config_error("", "cannot open config file " + path + ": " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) config_error("", "cannot read config file " + path + ": " + std::strerror(errno));
  return parse_config(text.str(), path, overrides);
}

std::string config_to_toml(const Config& config) {
  std::string out = "# gradmesh training config, fully resolved: every key, defaults included.\n";
  for (const SectionSpec& section : config_sections()) {
    out += "\n[" + section.name + "]\n";
    for (const KeySpec& spec : config_schema())
      if (spec.section == section.name)
        out += spec.path.substr(section.name.size() + 1) + " = " + format_value(spec.get(config)) + "\n";
  }
  return out;
}

std::string training_config_hash(const Config& config) {
  Config maths = config;
  // How the run is executed, not what it computes: reset to the defaults.
  maths.train.threads = TrainConfig().threads;
  maths.train.log_every = TrainConfig().log_every;
  maths.train.eval_every_epoch = TrainConfig().eval_every_epoch;
  maths.data.prefetch = DataConfig().prefetch;
  maths.data.workers = DataConfig().workers;  // samples are pure functions of (epoch, index)
  maths.data.cache_mb = DataConfig().cache_mb;
  maths.model.recompute = ModelConfig().recompute;  // recomputed activations give bit-identical gradients
  maths.parallel = ParallelConfig();
  maths.parallel.comm_dtype = config.parallel.comm_dtype;  // bf16 gradients change the sums
  // Compression and local steps change what every step computes.
  maths.parallel.compression = config.parallel.compression;
  maths.parallel.powersgd_rank = config.parallel.powersgd_rank;
  maths.parallel.powersgd_start_step = config.parallel.powersgd_start_step;
  maths.parallel.local_steps = config.parallel.local_steps;
  maths.parallel.outer_lr = config.parallel.outer_lr;
  maths.parallel.outer_momentum = config.parallel.outer_momentum;
  maths.output = OutputConfig();
  maths.checkpoint = CheckpointConfig();
  maths.elastic = ElasticConfig();
  maths.metering = MeteringConfig();
  const std::string text = config_to_toml(maths);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(text.data(), text.size(), 0)));
  return hex;
}

}  // namespace gradmesh::train
