// gradmesh's Store interface over a torch.distributed store (the TCPStore
// that env:// made, behind the PrefixStore torch gives each group), so a
// gradmesh group rendezvouses where the script's other groups do.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <string>
#include <vector>

#include "gradmesh/comm/store.h"

namespace gradmesh::pytorch {

std::shared_ptr<comm::Store> bridge_store(c10::intrusive_ptr<c10d::Store> store);

}  // namespace gradmesh::pytorch
