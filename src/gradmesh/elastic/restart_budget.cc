#include "gradmesh/elastic/restart_budget.h"

#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::elastic {
namespace {

constexpr const char* kExhausted = "exhausted";

int parse_count(const std::string& value, const std::string& key) {
  const std::optional<int64_t> n = try_parse_int(value, 0, 1'000'000'000);
  if (!n) throw_error(ErrorKind::kFormat, "store key '" + key + "'", "expected a restart count, got '" + value + "'");
  return static_cast<int>(*n);
}

}  // namespace

RestartBudget::RestartBudget(std::shared_ptr<comm::Store> store, std::string run_id, int max_restarts)
    : store_(std::move(store)), run_id_(std::move(run_id)), max_restarts_(max_restarts) {}

int RestartBudget::used() {
  const std::string key = run_id_ + "/restarts";
  return store_->check({key}) ? parse_count(store_->get(key, comm::Millis{5000}), key) : 0;
}

std::optional<int> RestartBudget::claim(int next_generation) {
  const std::string key = run_id_ + "/" + std::to_string(next_generation) + "/restart";
  const int current = used();
  const std::string proposal = current >= max_restarts_ ? kExhausted : std::to_string(current + 1);
  const std::string agreed = store_->compare_set(key, "", proposal);
  if (agreed == kExhausted) return std::nullopt;
  const int n = parse_count(agreed, key);
  store_->set(run_id_ + "/restarts", agreed);  // the same value from every launcher
  return n;
}

void RestartBudget::publish_record(const RestartRecord& record) {
  try {
    store_->compare_set(restart_record_key(run_id_, record.generation), "", restart_record_json(record));
  } catch (const Error& e) {
    log_warn(std::string("cannot write the restart record: ") + e.what());
  }
}

std::string budget_exhausted_text(int max_restarts) {
  const std::string n = std::to_string(max_restarts);
  return "restart budget exhausted (" + n + " of " + n + (max_restarts == 1 ? " restart" : " restarts") +
         " used); giving up";
}

}  // namespace gradmesh::elastic
