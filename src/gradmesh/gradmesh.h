// gradmesh's public surface in one include, for programs built against an
// installed gradmesh (docs/library.md; examples/custom_model/ uses only this).
//
// What is here: tensors, errors and the counter-based RNG; autograd (variables,
// the tape, differentiable ops); modules, layers, built-in models and the
// flat-parameter Model; optimizers, learning-rate schedules and clipping;
// datasets and the prefetching loader; stores, process groups and joining the
// job `gradmesh launch` (or mpirun) started; DataParallel (the step protocol
// of data parallelism in one object), the gradient reducers and start-up
// agreement; safetensors.
//
// This file is the public API: `cmake --install` installs it and exactly the
// gradmesh headers it reaches (cmake/install_package.cmake), nothing else.
// Everything here includes only the standard library and other gradmesh
// headers: no JSON, TOML, Gloo or MPI headers reach a program through it
// (tests/cli/install_package_test.cc checks it). The config-driven trainer
// (train/), the launcher (elastic/), observability (obs/) and the backends'
// internals are the executable's, not the library's API.
#pragma once

#include "gradmesh/config.h"

#include "gradmesh/core/clock.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/core/tensor.h"

#include "gradmesh/kernels/attention.h"  // attention_decode: one position against a key/value cache
#include "gradmesh/kernels/gemm.h"  // set_num_threads: BLAS and kernel threads per process

#include "gradmesh/autograd/attention.h"
#include "gradmesh/autograd/ops.h"
#include "gradmesh/autograd/tape.h"
#include "gradmesh/autograd/variable.h"

#include "gradmesh/nn/generate.h"
#include "gradmesh/nn/gpt.h"
#include "gradmesh/nn/init.h"
#include "gradmesh/nn/layers.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/nn/module.h"

#include "gradmesh/optim/clip.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/optim/schedule.h"

#include "gradmesh/data/batch_loader.h"
#include "gradmesh/data/idx.h"
#include "gradmesh/data/image_dataset.h"
#include "gradmesh/data/sample_source.h"
#include "gradmesh/data/token_file.h"

#include "gradmesh/comm/environment.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/comm/store.h"
#include "gradmesh/comm/work.h"

#include "gradmesh/parallel/data_parallel.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/parallel/rank_agreement.h"
#include "gradmesh/parallel/zero_reducer.h"

#include "gradmesh/checkpoint/safetensors.h"
