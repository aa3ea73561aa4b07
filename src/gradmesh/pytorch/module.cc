// gradmesh.torch._C: the Python side of the torch.distributed backend
// (python/gradmesh/torch/__init__.py registers it as "gradmesh").
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "gradmesh/comm/traffic_meter.h"
#include "gradmesh/pytorch/group_factory.h"
#include "gradmesh/pytorch/process_group.h"

namespace py = pybind11;
using gradmesh::pytorch::GradmeshProcessGroup;

namespace {

GradmeshProcessGroup& gradmesh_group(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  auto* ours = dynamic_cast<GradmeshProcessGroup*>(group.get());
  TORCH_CHECK(ours != nullptr, "not a gradmesh process group (backend ", group->getBackendName(), ")");
  return *ours;
}

// Runs `f` with the interpreter lock released when this thread holds it.
// While the interpreter shuts down the lock stays: threads that would take it
// then are stopped by Python itself, so nothing waits on this one.
void run_unlocked(const std::function<void()>& f) {
  if (Py_IsInitialized() && !_Py_IsFinalizing() && PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    f();
    return;
  }
  f();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  GradmeshProcessGroup::set_unlocked_runner(&run_unlocked);
  m.doc() = "gradmesh's collectives as a torch.distributed backend";
  m.def(
      "create_group",
      [](c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds timeout,
         std::vector<int> world_ranks, bool check) {
        gradmesh::pytorch::GroupRequest request{std::move(store), rank, size, timeout, std::move(world_ranks), check};
        py::gil_scoped_release no_gil;  // the rendezvous waits for the other ranks
        return gradmesh::pytorch::make_group(request);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("world_ranks"),
      py::arg("check") = false);
  m.def(
      "transport", [](const c10::intrusive_ptr<c10d::ProcessGroup>& group) { return gradmesh_group(group).group().backend(); },
      "The gradmesh backend under a gradmesh process group: shm, gloo or hier.");
  m.def(
      "is_broken", [](const c10::intrusive_ptr<c10d::ProcessGroup>& group) { return gradmesh_group(group).broken(); },
      "True once an operation of the group failed (every later one fails at once).");
  m.def(
      "traffic",
      [] {
        py::dict out;
        for (const auto& [backend, t] : gradmesh::comm::traffic_by_backend()) {
          py::dict row;
          row["sent"] = t.sent;
          row["received"] = t.received;
          row["inter_host_sent"] = t.inter_host_sent;
          row["inter_host_received"] = t.inter_host_received;
          out[py::str(backend)] = row;
        }
        return out;
      },
      "Bytes this process sent and received through gradmesh, per transport.");
}
