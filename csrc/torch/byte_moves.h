// Ops that only move elements run on float8 and complex64 tensors as on integers.
//
// cat, stack, indexing, index_select, gather, take, masked_select, flip, roll, tril, triu, where
// and (non-accumulating) index_put copy each element's bits unchanged (or write zeros, whose bits
// are zero in every one of these types), so on a float8 tensor they do exactly what they do on a
// uint8 view of it, and on a complex64 tensor what they do on an int64 view. The CPU fallback
// hands such calls here first: they run on ember's integer kernels, on the device, instead of
// making a round trip through host memory.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace ember::torch_glue {

// Runs `op` on integer views when it is a pure element move whose data arguments (self, tensors,
// other, values, out) are all float8 or all complex64 of one dtype, with no lazy conjugate or
// negation; the results have that dtype again. Returns false, leaving the stack untouched, for
// every other call.
bool run_moves_as_bits(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace ember::torch_glue
