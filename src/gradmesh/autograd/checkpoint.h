// Activation checkpointing: a piece of the graph that keeps only its input.
//
// checkpoint(f, x, params) runs f(x) without recording, so none of f's
// intermediate activations stay alive, and records one op. Its backward runs
// f(x) again on a tape of its own, backpropagates the incoming gradient
// through it and hands the input's gradient on: memory falls by everything f
// saves for backward, and the time grows by one more forward of f. The
// recomputation is the same arithmetic in the same order (dropout masks are
// keyed by step, layer and sample, not drawn from a state), so the gradients
// are bit-identical to running f normally.
#pragma once

#include <functional>
#include <vector>

#include "gradmesh/autograd/variable.h"

namespace gradmesh::autograd {

// `params` are the parameters f reads (their gradients are written by the
// recomputation, and the "gradient final" hook of each fires when the
// enclosing backward passes this op). f must not read other Variables that
// need a gradient.
Variable checkpoint(const std::function<Variable(const Variable&)>& f, const Variable& x,
                    const std::vector<Variable>& params);

}  // namespace gradmesh::autograd
