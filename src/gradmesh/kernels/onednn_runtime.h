// What gemm_bf16.cc and conv_bf16.cc share about running oneDNN: one CPU
// engine, the OpenMP thread count, the lock held while primitives are made,
// and a scratchpad per calling thread. Includes dnnl.hpp: only those two
// files include this header.
#pragma once

#include <dnnl.hpp>
#include <mutex>
#include <unordered_map>

namespace gradmesh::kernels::onednn {

dnnl::engine& cpu_engine();
// A stream for the calling thread on cpu_engine().
dnnl::stream& thread_stream();

// Debian's oneDNN runs its threads on OpenMP, which takes its thread count
// from the calling thread's setting: it is set to gradmesh's count
// (kernels::num_threads()) before each primitive runs.
void use_gradmesh_threads();

// Held while a primitive is made: oneDNN sets up its own primitive cache
// lazily on first use, and two threads making their first primitives at
// once raced there. Primitives are made once per shape, so waiting costs nothing.
std::mutex& creation_mutex();

// An attribute whose scratchpad the caller passes (scratchpad_for): the
// library's own is one per process unless oneDNN was built for concurrent
// execution, which Debian's is not, so ranks or server threads running
// primitives at once overwrote each other's partial sums.
dnnl::primitive_attr user_scratchpad_attr();
// The calling thread's scratchpad, grown to pd's need.
dnnl::memory scratchpad_for(const dnnl::primitive_desc_base& pd);

// Runs a primitive on the calling thread's stream with its args plus the
// thread's scratchpad for pd, and waits for it.
void execute(const dnnl::primitive& primitive, const dnnl::primitive_desc_base& pd,
             std::unordered_map<int, dnnl::memory> args);

}  // namespace gradmesh::kernels::onednn
