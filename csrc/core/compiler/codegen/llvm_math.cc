// Float math emitted as LLVM IR. See llvm_math.h.
#include "compiler/codegen/llvm_math.h"

#include <limits>

#include <llvm/IR/Intrinsics.h>

namespace ember::compiler::codegen {

using llvm::Value;

Value* Math::call(llvm::IRBuilder<>& b, const char* name, Value* x) {
    return b.CreateCall(get(name), {x});
}

llvm::Function* Math::get(const char* name) {
    auto it = fns_.find(name);
    if (it != fns_.end()) return it->second;
    llvm::Type* f = llvm::Type::getFloatTy(ctx_);
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(f, {f}, false), llvm::Function::InternalLinkage,
                                      std::string("ember_") + name, m_);
    fn->addFnAttr(llvm::Attribute::AlwaysInline);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    fn->setDoesNotAccessMemory();
    fns_[name] = fn;
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx_, "entry", fn));
    // Polynomial steps p * x + c may become FMAs, as GCC makes them in the eager kernels
    // (vec_math.h): fewer instructions (erf 20% faster) and the eager kernels' rounding.
    llvm::FastMathFlags fmf;
    fmf.setAllowContract(true);
    b.setFastMathFlags(fmf);
    Value* x = fn->getArg(0);
    const std::string n = name;
    Value* r = nullptr;
    if (n == "exp") r = exp(b, x);
    else if (n == "log") r = log(b, x);
    else if (n == "tanh") r = tanh(b, x);
    else if (n == "erf") r = erf(b, x);
    b.CreateRet(r);
    return fn;
}

Value* Math::poly(llvm::IRBuilder<>& b, Value* x, std::initializer_list<float> coeffs) {
    Value* p = nullptr;
    for (float k : coeffs) p = p ? b.CreateFAdd(b.CreateFMul(p, x), c(k)) : c(k);
    return p;
}

Value* Math::pow2i(llvm::IRBuilder<>& b, Value* k) {
    return b.CreateBitCast(b.CreateShl(b.CreateAdd(k, ci(127)), ci(23)), llvm::Type::getFloatTy(ctx_));
}

// Below -104.5 the result rounds to +0 (p <= sqrt2 times 2^-151): such inputs are evaluated
// at 0 and replaced by 0, the same bits without the subnormal intermediate whose microcode
// assist (~150 cycles per vector on x86) made masked softmax (scores at -1e9) 4x slower.
Value* Math::exp(llvm::IRBuilder<>& b, Value* x) {
    Value* zero = b.CreateFCmpOLT(x, c(-104.5f));
    x = b.CreateSelect(zero, c(0.f), x);
    Value* cl = b.CreateSelect(b.CreateFCmpOGT(x, c(-110.f)), x, c(-110.f));
    cl = b.CreateSelect(b.CreateFCmpOLT(cl, c(89.f)), cl, c(89.f));
    Value* fn = b.CreateFSub(b.CreateFAdd(b.CreateFMul(cl, c(1.44269504088896341f)), c(12582912.f)), c(12582912.f));
    Value* n = b.CreateFPToSI(fn, llvm::Type::getInt32Ty(ctx_));
    Value* r = b.CreateFSub(b.CreateFSub(cl, b.CreateFMul(fn, c(0.693359375f))), b.CreateFMul(fn, c(-2.12194440e-4f)));
    Value* p = poly(b, r, {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                           1.6666665459e-1f, 5.0000001201e-1f});
    p = b.CreateFAdd(b.CreateFAdd(b.CreateFMul(p, b.CreateFMul(r, r)), r), c(1.f));
    Value* half = b.CreateAShr(n, ci(1));
    Value* y = b.CreateFMul(b.CreateFMul(p, pow2i(b, half)), pow2i(b, b.CreateSub(n, half)));
    y = b.CreateSelect(zero, c(0.f), y);
    return b.CreateSelect(b.CreateFCmpUNO(x, x), x, y);
}

Value* Math::log(llvm::IRBuilder<>& b, Value* x) {
    llvm::Type* i32 = llvm::Type::getInt32Ty(ctx_);
    llvm::Type* f32 = llvm::Type::getFloatTy(ctx_);
    Value* small = b.CreateFCmpOLT(x, c(1.17549435e-38f));
    Value* xs = b.CreateSelect(small, b.CreateFMul(x, c(8388608.f)), x);
    Value* eadj = b.CreateSelect(small, ci(-23), ci(0));
    Value* u = b.CreateBitCast(xs, i32);
    Value* e = b.CreateAdd(b.CreateSub(b.CreateAnd(b.CreateLShr(u, ci(23)), ci(0xff)), ci(126)), eadj);
    Value* m = b.CreateBitCast(b.CreateOr(b.CreateAnd(u, ci(0x007fffff)), ci(0x3f000000)), f32);
    Value* lt = b.CreateFCmpOLT(m, c(0.707106781186547524f));
    e = b.CreateSub(e, b.CreateZExt(lt, i32));
    m = b.CreateSelect(lt, b.CreateFSub(b.CreateFAdd(m, m), c(1.f)), b.CreateFSub(m, c(1.f)));
    Value* fe = b.CreateSIToFP(e, f32);
    Value* z = b.CreateFMul(m, m);
    Value* y = poly(b, m, {7.0376836292E-2f, -1.1514610310E-1f, 1.1676998740E-1f, -1.2420140846E-1f,
                           1.4249322787E-1f, -1.6668057665E-1f, 2.0000714765E-1f, -2.4999993993E-1f,
                           3.3333331174E-1f});
    y = b.CreateFMul(b.CreateFMul(y, m), z);
    y = b.CreateFAdd(y, b.CreateFMul(fe, c(-2.12194440e-4f)));
    y = b.CreateFAdd(y, b.CreateFMul(z, c(-0.5f)));
    Value* r = b.CreateFAdd(b.CreateFAdd(m, y), b.CreateFMul(fe, c(0.693359375f)));
    const float inf = std::numeric_limits<float>::infinity();
    r = b.CreateSelect(b.CreateFCmpOEQ(x, c(inf)), c(inf), r);
    r = b.CreateSelect(b.CreateFCmpOEQ(x, c(0.f)), c(-inf), r);
    r = b.CreateSelect(b.CreateFCmpOLT(x, c(0.f)), c(std::numeric_limits<float>::quiet_NaN()), r);
    return b.CreateSelect(b.CreateFCmpUNO(x, x), x, r);
}

Value* Math::tanh(llvm::IRBuilder<>& b, Value* x) {
    Value* neg = b.CreateFCmpOLT(x, c(0.f));
    Value* a = b.CreateSelect(neg, b.CreateFNeg(x), x);
    Value* z = b.CreateFMul(x, x);
    Value* small = b.CreateFAdd(
        b.CreateFMul(b.CreateFMul(poly(b, z, {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                                              1.33314422036e-1f, -3.33332819422e-1f}), z), x),
        x);
    Value* large = b.CreateFSub(c(1.f), b.CreateFDiv(c(2.f), b.CreateFAdd(call(b, "exp", b.CreateFAdd(a, a)), c(1.f))));
    large = b.CreateSelect(neg, b.CreateFNeg(large), large);
    large = b.CreateSelect(b.CreateFCmpUNO(x, x), x, large);
    // small takes x's sign back: -0 * z * p + -0 rounds to +0, and tanh(-0) is -0.
    small = b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, small, x);
    return b.CreateSelect(b.CreateFCmpOLT(a, c(0.625f)), small, large);
}

// |x| < 0.5: the Taylor series to x^11 (error < 2e-8); else Abramowitz & Stegun 7.1.26
// (absolute error < 1.5e-7), whose exp(-x^2) is our own exp.
Value* Math::erf(llvm::IRBuilder<>& b, Value* x) {
    Value* neg = b.CreateFCmpOLT(x, c(0.f));
    Value* a = b.CreateSelect(neg, b.CreateFNeg(x), x);
    Value* z = b.CreateFMul(a, a);
    Value* s = poly(b, z, {-1.f / 1320.f, 1.f / 216.f, -1.f / 42.f, 1.f / 10.f, -1.f / 3.f, 1.f});
    s = b.CreateFMul(b.CreateFMul(s, a), c(1.1283791670955126f));
    Value* t = b.CreateFDiv(c(1.f), b.CreateFAdd(c(1.f), b.CreateFMul(a, c(0.3275911f))));
    Value* p = poly(b, t, {1.061405429f, -1.453152027f, 1.421413741f, -0.284496736f, 0.254829592f});
    Value* l = b.CreateFSub(c(1.f), b.CreateFMul(b.CreateFMul(p, t), call(b, "exp", b.CreateFNeg(z))));
    Value* r = b.CreateSelect(b.CreateFCmpOLT(a, c(0.5f)), s, l);
    return b.CreateSelect(neg, b.CreateFNeg(r), r);
}

}  // namespace ember::compiler::codegen
