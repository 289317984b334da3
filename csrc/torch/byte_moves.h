// Ops that only move elements run on float8 tensors as on bytes.
//
// cat, stack, indexing, index_select, flip, roll, where and (non-accumulating) index_put copy
// each element's bits unchanged, so on a float8 tensor they do exactly what they do on a uint8
// view of it. The CPU fallback hands such calls here first: they run on ember's uint8 kernels,
// on the device, instead of making a round trip through host memory.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace ember::torch_glue {

// Runs `op` on uint8 views when it is a pure element move whose data arguments (self, tensors,
// other, values, out) are all float8 of one dtype; the results are float8 again. Returns false,
// leaving the stack untouched, for every other call.
bool run_float8_as_bytes(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace ember::torch_glue
