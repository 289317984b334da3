// Conversions between float32 registers and the narrow float types generated kernels load and
// store (bfloat16, float8_e4m3fn, float8_e5m2), as LLVM IR built from integer ops that
// vectorize, rounding exactly as kernels/dtype.h's conversions (and so as PyTorch's CPU).
#pragma once

#include "compiler/codegen/llvm_headers.h"
#include "kernels/dtype.h"

namespace ember::compiler::codegen {

llvm::Value* from_bf16_bits(llvm::IRBuilder<>& b, llvm::Value* bits);  // i16 -> f32
llvm::Value* to_bf16_bits(llvm::IRBuilder<>& b, llvm::Value* f);       // f32 -> i16
llvm::Value* round_bf16(llvm::IRBuilder<>& b, llvm::Value* f);         // f32 -> f32 rounded to bfloat16
llvm::Value* from_f8_bits(llvm::IRBuilder<>& b, llvm::Value* bits, kernels::DType t);  // i8 -> f32
llvm::Value* to_f8_bits(llvm::IRBuilder<>& b, llvm::Value* f, kernels::DType t);       // f32 -> i8

}  // namespace ember::compiler::codegen
