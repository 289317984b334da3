#include "compiler/codegen/llvm_convert.h"

#include <cmath>

namespace ember::compiler::codegen {

using kernels::DType;
using llvm::Value;

Value* from_bf16_bits(llvm::IRBuilder<>& b, Value* bits) {
    Value* w = b.CreateShl(b.CreateZExt(bits, llvm::Type::getInt32Ty(b.getContext())), 16);
    return b.CreateBitCast(w, b.getFloatTy());
}

// Round to nearest even, NaN kept quiet (0x7fc0), as kernels/dtype.h's to_bfloat16.
Value* to_bf16_bits(llvm::IRBuilder<>& b, Value* f) {
    llvm::Type* i32 = llvm::Type::getInt32Ty(b.getContext());
    Value* u = b.CreateBitCast(f, i32);
    Value* lsb = b.CreateAnd(b.CreateLShr(u, 16), llvm::ConstantInt::get(i32, 1));
    Value* r = b.CreateLShr(b.CreateAdd(b.CreateAdd(u, llvm::ConstantInt::get(i32, 0x7fff)), lsb), 16);
    r = b.CreateTrunc(r, llvm::Type::getInt16Ty(b.getContext()));
    return b.CreateSelect(b.CreateFCmpUNO(f, f), llvm::ConstantInt::get(llvm::Type::getInt16Ty(b.getContext()), 0x7fc0), r);
}

// An f32 rounded to the nearest bfloat16 and kept in f32 (a cast whose result stays in registers):
// to_bf16_bits then from_bf16_bits without narrowing to 16 bits and widening again, which
// vectorizes to a few 32-bit integer ops instead of packs and unpacks.
Value* round_bf16(llvm::IRBuilder<>& b, Value* f) {
    llvm::Type* i32 = llvm::Type::getInt32Ty(b.getContext());
    Value* u = b.CreateBitCast(f, i32);
    Value* lsb = b.CreateAnd(b.CreateLShr(u, 16), llvm::ConstantInt::get(i32, 1));
    Value* r = b.CreateAnd(b.CreateAdd(b.CreateAdd(u, llvm::ConstantInt::get(i32, 0x7fff)), lsb),
                            llvm::ConstantInt::get(i32, 0xffff0000u));
    r = b.CreateSelect(b.CreateFCmpUNO(f, f), llvm::ConstantInt::get(i32, 0x7fc00000u), r);
    return b.CreateBitCast(r, b.getFloatTy());
}

// float8 widening, exact (kernels/dtype.cc's to_float): e5m2 is the top byte of a float16;
// e4m3fn is rebuilt from its fields, subnormals as mantissa * 2^-9, 0x7f/0xff as the CPU's NaN.
Value* from_f8_bits(llvm::IRBuilder<>& b, Value* bits, DType t) {
    llvm::Type* i32 = llvm::Type::getInt32Ty(b.getContext());
    auto c = [&](uint32_t v) { return llvm::ConstantInt::get(i32, v); };
    Value* u = b.CreateZExt(bits, i32);
    if (t == DType::kFloat8E5M2) {
        Value* h = b.CreateTrunc(b.CreateShl(u, 8), llvm::Type::getInt16Ty(b.getContext()));
        return b.CreateFPExt(b.CreateBitCast(h, llvm::Type::getHalfTy(b.getContext())), b.getFloatTy());
    }
    Value* exp = b.CreateAnd(b.CreateLShr(u, 3), c(0xf));
    Value* mant = b.CreateAnd(u, c(0x7));
    Value* normal = b.CreateOr(b.CreateShl(b.CreateAdd(exp, c(120)), 23), b.CreateShl(mant, 20));
    Value* sub = b.CreateBitCast(b.CreateFMul(b.CreateUIToFP(mant, b.getFloatTy()), llvm::ConstantFP::get(b.getFloatTy(), 1.0 / 512)), i32);
    Value* mag = b.CreateSelect(b.CreateICmpEQ(exp, c(0)), sub, normal);
    mag = b.CreateSelect(b.CreateICmpEQ(b.CreateAnd(u, c(0x7f)), c(0x7f)), c(0x7ff00000u), mag);
    return b.CreateBitCast(b.CreateOr(mag, b.CreateShl(b.CreateAnd(u, c(0x80)), 24)), b.getFloatTy());
}

// float8 narrowing, rounded to nearest even as kernels/dtype.cc's to_float8_*: past the largest
// value e4m3fn saturates and e5m2 gives infinity; subnormal results are the magnitude in units of the
// smallest subnormal, rounded to even; normal ones keep the float's top mantissa bits, rounded
// on the last kept bit, then rebiased (a carry moves into the exponent, as it should).
Value* to_f8_bits(llvm::IRBuilder<>& b, Value* f, DType t) {
    llvm::Type* i32 = llvm::Type::getInt32Ty(b.getContext());
    auto c = [&](uint32_t v) { return llvm::ConstantInt::get(i32, v); };
    const bool e4m3 = t == DType::kFloat8E4M3FN;
    const int mant_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15, drop = 23 - mant_bits;
    Value* u = b.CreateBitCast(f, i32);
    Value* a = b.CreateAnd(u, c(0x7fffffffu));
    Value* sign = b.CreateAnd(b.CreateLShr(u, 24), c(0x80));
    Value* lsb = b.CreateAnd(b.CreateLShr(a, drop), c(1));
    Value* rounded = b.CreateAdd(b.CreateAdd(a, c((1u << (drop - 1)) - 1)), lsb);
    Value* normal = b.CreateSub(b.CreateLShr(rounded, drop), c(static_cast<uint32_t>(127 - bias) << mant_bits));
    Value* scaled = b.CreateFMul(b.CreateBitCast(a, b.getFloatTy()),
                                  llvm::ConstantFP::get(b.getFloatTy(), std::ldexp(1.0, bias - 1 + mant_bits)));
    Value* even = b.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, scaled);
    Value* sub = b.CreateFPToUI(even, i32);
    Value* mag = b.CreateSelect(b.CreateICmpULT(a, c(static_cast<uint32_t>(128 - bias) << 23)), sub, normal);
    if (e4m3) {
        mag = b.CreateSelect(b.CreateICmpUGE(a, c(0x43e00000u)), c(0x7e), mag);
        mag = b.CreateSelect(b.CreateICmpUGT(a, c(0x7f800000u)), c(0x7f), mag);
    } else {
        mag = b.CreateSelect(b.CreateICmpUGE(a, c(0x47800000u)), c(0x7c), mag);
        mag = b.CreateSelect(b.CreateICmpUGT(a, c(0x7f800000u)), c(0x7f), mag);
    }
    return b.CreateTrunc(b.CreateOr(mag, sign), llvm::Type::getInt8Ty(b.getContext()));
}

}  // namespace ember::compiler::codegen
