#include "gradmesh/pytorch/store_bridge.h"

#include "gradmesh/core/error.h"

namespace gradmesh::pytorch {
namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

class TorchStore final : public comm::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override {
    guard("set " + key, [&] { store_->set(key, bytes_of(value)); });
  }
  std::string get(const std::string& key, comm::Millis timeout) override {
    wait({key}, timeout);
    std::string value;
    guard("get " + key, [&] { value = string_of(store_->get(key)); });
    return value;
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t value = 0;
    guard("add " + key, [&] { value = store_->add(key, delta); });
    return value;
  }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    std::string value;
    guard("compare_set " + key,
          [&] { value = string_of(store_->compareSet(key, bytes_of(expected), bytes_of(desired))); });
    return value;
  }
  void wait(const std::vector<std::string>& keys, comm::Millis timeout) override {
    try {
      store_->wait(keys, std::chrono::milliseconds(timeout.count()));
    } catch (const c10::Error& e) {
      std::string names;
      for (const std::string& k : keys) names += (names.empty() ? "" : ", ") + k;
      throw_error(ErrorKind::kTimeout, "torch store",
                  "keys " + names + " did not appear within " + std::to_string(timeout.count()) +
                      " ms (a rank that has not reached this group's creation?): " + e.what_without_backtrace());
    }
  }
  bool check(const std::vector<std::string>& keys) override {
    bool present = false;
    guard("check", [&] { present = store_->check(keys); });
    return present;
  }
  bool remove(const std::string& key) override {
    bool existed = false;
    guard("delete " + key, [&] { existed = store_->deleteKey(key); });
    return existed;
  }
  std::string describe() const override { return "torch.distributed store"; }

 private:
  template <typename F>
  void guard(const std::string& what, F&& call) {
    try {
      call();
    } catch (const c10::Error& e) {
      throw_error(ErrorKind::kComm, "torch store", what + ": " + e.what_without_backtrace());
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

std::shared_ptr<comm::Store> bridge_store(c10::intrusive_ptr<c10d::Store> store) {
  return std::make_shared<TorchStore>(std::move(store));
}

}  // namespace gradmesh::pytorch
