#include "gradmesh/kernels/onednn_runtime.h"

#include <omp.h>

#include <vector>

#include "gradmesh/kernels/gemm.h"

namespace gradmesh::kernels::onednn {

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

void use_gradmesh_threads() {
  thread_local int applied = 0;
  const int threads = num_threads();
  if (applied != threads) {
    omp_set_num_threads(threads);
    applied = threads;
  }
}

std::mutex& creation_mutex() {
  static std::mutex mutex;
  return mutex;
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::memory scratchpad_for(const dnnl::primitive_desc_base& pd) {
  thread_local std::vector<unsigned char> scratch;
  const dnnl::memory::desc md = pd.scratchpad_desc();
  if (scratch.size() < md.get_size()) scratch.resize(md.get_size());
  return dnnl::memory(md, cpu_engine(), scratch.data());
}

void execute(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args) {
  use_gradmesh_threads();
  args.insert({DNNL_ARG_SCRATCHPAD, scratchpad_for(pd)});
  primitive.execute(thread_stream(), args);
  thread_stream().wait();
}

}  // namespace gradmesh::kernels::onednn
