// Inlinable float math for generated kernels: exp, log, tanh and erf as LLVM functions, emitted
// once per module on first use and always inlined. Polynomials are Cephes' (as in
// torch_ember/vec_math.h), so compiled and eager results agree to an ulp or two.
#pragma once

#include <initializer_list>
#include <string>
#include <unordered_map>

#include "compiler/codegen/llvm_headers.h"

namespace ember::compiler::codegen {

class Math {
  public:
    explicit Math(llvm::Module& m) : m_(m), ctx_(m.getContext()) {}

    // name is one of "exp", "log", "tanh", "erf"; x is a float.
    llvm::Value* call(llvm::IRBuilder<>& b, const char* name, llvm::Value* x);

  private:
    using Value = llvm::Value;
    llvm::Function* get(const char* name);
    Value* c(float v) { return llvm::ConstantFP::get(llvm::Type::getFloatTy(ctx_), v); }
    Value* ci(int32_t v) { return llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx_), v); }
    Value* poly(llvm::IRBuilder<>& b, Value* x, std::initializer_list<float> coeffs);
    Value* pow2i(llvm::IRBuilder<>& b, Value* k);
    Value* exp(llvm::IRBuilder<>& b, Value* x);
    Value* log(llvm::IRBuilder<>& b, Value* x);
    Value* tanh(llvm::IRBuilder<>& b, Value* x);
    Value* erf(llvm::IRBuilder<>& b, Value* x);

    llvm::Module& m_;
    llvm::LLVMContext& ctx_;
    std::unordered_map<std::string, llvm::Function*> fns_;
};

}  // namespace ember::compiler::codegen
