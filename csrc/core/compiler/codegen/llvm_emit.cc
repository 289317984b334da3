// Kernel IR -> LLVM IR -> O2 -> object file. See llvm_emit.h for the contract.
#include "compiler/codegen/llvm_emit.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>

#include "compiler/codegen/llvm_convert.h"
#include "compiler/codegen/llvm_headers.h"
#include "compiler/codegen/column_form.h"
#include "compiler/codegen/llvm_math.h"
#include "compiler/jit/orc_jit.h"

namespace ember::compiler::codegen {
namespace {

using llvm::Value;

double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

class KernelEmitter {
  public:
    KernelEmitter(llvm::Module& m, Math& math, const Kernel& k, const llvm::TargetMachine& tm)
        : m_(m), ctx_(m.getContext()), b_(ctx_), math_(math), k_(k), tm_(tm) {}

    void emit();

  private:
    llvm::Type* i64() { return llvm::Type::getInt64Ty(ctx_); }
    llvm::Type* f32() { return llvm::Type::getFloatTy(ctx_); }
    llvm::Type* f64() { return llvm::Type::getDoubleTy(ctx_); }
    Value* ci64(int64_t v) { return llvm::ConstantInt::get(i64(), v); }
    llvm::Type* cls_type(Cls c) {
        switch (c) {
            case Cls::kBool: return llvm::Type::getInt1Ty(ctx_);
            case Cls::kI64: return i64();
            case Cls::kF32: return f32();
            case Cls::kF64: return f64();
        }
        return f32();
    }
    llvm::Type* mem_type(DType t);
    Value* constant(Cls c, double f, int64_t i);
    Value* convert(Value* v, Cls from, Cls to);
    Value* float_to_int(Value* v, DType to);
    Value* convert_to(Value* v, Cls from, DType to);
    Value* load(const Expr& x);
    void store(const Store& s, Value* v, Cls from);
    Value* eval(int e);
    Value* eval_idx(int i);
    Value* apply(const Expr& x);
    Value* unary(Op op, Value* a, Cls c);
    Value* base(int buffer);
    void tag(llvm::Instruction* inst, int buffer);
    void loop(Value* lo, Value* hi, const std::function<void(Value*)>& body);
    void inner_nest(size_t level, const std::function<void()>& body, const std::function<void()>& flush = nullptr);
    void emit_phase(const Phase& p);
    Value* reduce_init(const Reduction& red);
    Value* reduce_finish(const Reduction& red, Value* acc_ptr);
    void set_lane(Value* j);
    Value* lookup(std::vector<std::unordered_map<int, Value*>>& scopes, int id) {
        for (size_t s = scopes.size(); s-- > 0;) {
            auto it = scopes[s].find(id);
            if (it != scopes[s].end()) return it->second;
        }
        return nullptr;
    }
    void push_scope() { emem_.emplace_back(); imem_.emplace_back(); }
    void pop_scope() { emem_.pop_back(); imem_.pop_back(); }

    llvm::Module& m_;
    llvm::LLVMContext& ctx_;
    llvm::IRBuilder<> b_;
    Math& math_;
    const Kernel& k_;
    const llvm::TargetMachine& tm_;
    llvm::Function* fn_ = nullptr;
    llvm::BasicBlock* entry_ = nullptr;
    Value* buffers_ = nullptr;
    std::unordered_map<int, Value*> bases_;
    std::unordered_map<int, llvm::MDNode*> scopes_;
    std::vector<Value*> vars_;
    std::vector<Value*> reduced_;
    // Column form (see emit_phase): lanes per block, 0 for the row form; the block's first value
    // of the last outer var and its lane count; each finished reduction's accumulator array.
    static constexpr int64_t kLanes = 1024;
    static constexpr int64_t kSumBlock = 1024;  // values per float32 block of a long sum
    int64_t lanes_ = 0;
    Value* col_ = nullptr;
    Value* cnt_ = nullptr;
    std::vector<Value*> lane_accs_;
    std::vector<std::unordered_map<int, Value*>> emem_, imem_;
};

llvm::Type* KernelEmitter::mem_type(DType t) {
    switch (t) {
        case DType::kBool: case DType::kUInt8: case DType::kInt8: return llvm::Type::getInt8Ty(ctx_);
        case DType::kFloat8E4M3FN: case DType::kFloat8E5M2: return llvm::Type::getInt8Ty(ctx_);
        case DType::kInt16: case DType::kBFloat16: return llvm::Type::getInt16Ty(ctx_);
        case DType::kFloat16: return llvm::Type::getHalfTy(ctx_);
        case DType::kInt32: return llvm::Type::getInt32Ty(ctx_);
        case DType::kFloat32: return f32();
        case DType::kFloat64: return f64();
        default: return i64();
    }
}

Value* KernelEmitter::constant(Cls c, double f, int64_t i) {
    switch (c) {
        case Cls::kBool: return llvm::ConstantInt::get(cls_type(c), (f != 0 || i != 0) ? 1 : 0);
        case Cls::kI64: return ci64(i);
        case Cls::kF32: return llvm::ConstantFP::get(f32(), f);
        case Cls::kF64: return llvm::ConstantFP::get(f64(), f);
    }
    return nullptr;
}

Value* KernelEmitter::convert(Value* v, Cls from, Cls to) {
    if (from == to) return v;
    const bool ff = from == Cls::kF32 || from == Cls::kF64, tf = to == Cls::kF32 || to == Cls::kF64;
    if (ff && tf) return to == Cls::kF64 ? b_.CreateFPExt(v, f64()) : b_.CreateFPTrunc(v, f32());
    if (to == Cls::kBool) {
        return ff ? b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0))
                  : b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    }
    if (from == Cls::kBool) return tf ? b_.CreateUIToFP(v, cls_type(to)) : b_.CreateZExt(v, i64());
    if (tf) return b_.CreateSIToFP(v, cls_type(to));
    return b_.CreateFPToSI(v, i64());
}

// A floating value to an integer dtype as the CPU's kernels convert it (C++'s static_cast, x86's
// truncating cvtt* instructions): to 32 bits (64 for int64), where NaN, infinities and values
// out of that range give the smallest integer; narrower dtypes then keep the low bits. LLVM's
// fptosi leaves those cases undefined, so they are selected explicitly.
Value* KernelEmitter::float_to_int(Value* v, DType to) {
    const bool wide = to == DType::kInt64;
    llvm::Type* it = wide ? i64() : llvm::Type::getInt32Ty(ctx_);
    const double limit = wide ? 9223372036854775808.0 : 2147483648.0;
    Value* in_range = b_.CreateAnd(b_.CreateFCmpOGE(v, llvm::ConstantFP::get(v->getType(), -limit)),
                                   b_.CreateFCmpOLT(v, llvm::ConstantFP::get(v->getType(), limit)));
    Value* lowest = wide ? ci64(INT64_MIN) : llvm::ConstantInt::get(it, INT32_MIN);
    Value* r = b_.CreateSelect(in_range, b_.CreateFPToSI(v, it), lowest);
    return wide ? r : b_.CreateSExt(r, i64());
}

// A value of class `from` to dtype `to`'s register class; floats to integers as float_to_int.
Value* KernelEmitter::convert_to(Value* v, Cls from, DType to) {
    const Cls c = value_class(to);
    return is_float_cls(from) && c == Cls::kI64 ? float_to_int(v, to) : convert(v, from, c);
}

Value* KernelEmitter::base(int buffer) {
    auto it = bases_.find(buffer);
    if (it != bases_.end()) return it->second;
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    llvm::Type* ptr = llvm::PointerType::getUnqual(ctx_);
    auto* p = eb.CreateLoad(ptr, eb.CreateConstInBoundsGEP1_64(ptr, buffers_, static_cast<uint64_t>(buffer)));
    p->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
    bases_[buffer] = p;
    return p;
}

// Each buffer is its own alias scope: stores to one never clobber loads from another, so the
// vectorizer needs no run-time overlap checks. An in-place output shares its input's buffer id,
// hence its scope, so that dependence stays visible.
void KernelEmitter::tag(llvm::Instruction* inst, int buffer) {
    llvm::MDNode* self = scopes_.at(buffer);
    std::vector<llvm::Metadata*> others;
    for (auto& [id, s] : scopes_)
        if (id != buffer) others.push_back(s);
    inst->setMetadata(llvm::LLVMContext::MD_alias_scope, llvm::MDNode::get(ctx_, {self}));
    if (!others.empty()) inst->setMetadata(llvm::LLVMContext::MD_noalias, llvm::MDNode::get(ctx_, others));
}

Value* KernelEmitter::load(const Expr& x) {
    llvm::Type* t = mem_type(x.dtype);
    Value* p = b_.CreateInBoundsGEP(t, base(x.buffer), eval_idx(x.addr));
    auto* ld = b_.CreateLoad(t, p);
    tag(ld, x.buffer);
    switch (x.dtype) {
        case DType::kBFloat16: return from_bf16_bits(b_, ld);
        case DType::kFloat16: return b_.CreateFPExt(ld, f32());
        case DType::kFloat8E4M3FN: case DType::kFloat8E5M2: return from_f8_bits(b_, ld, x.dtype);
        case DType::kBool: return b_.CreateICmpNE(ld, llvm::ConstantInt::get(t, 0));
        case DType::kUInt8: return b_.CreateZExt(ld, i64());
        case DType::kInt8: case DType::kInt16: case DType::kInt32: return b_.CreateSExt(ld, i64());
        default: return ld;
    }
}

void KernelEmitter::store(const Store& s, Value* v, Cls from) {
    v = convert_to(v, from, s.dtype);
    llvm::Type* t = mem_type(s.dtype);
    switch (s.dtype) {
        case DType::kBFloat16: v = to_bf16_bits(b_, v); break;
        case DType::kFloat16: v = b_.CreateFPTrunc(v, t); break;
        case DType::kFloat8E4M3FN: case DType::kFloat8E5M2: v = to_f8_bits(b_, v, s.dtype); break;
        case DType::kBool: v = b_.CreateZExt(v, t); break;
        case DType::kUInt8: case DType::kInt8: case DType::kInt16: case DType::kInt32: v = b_.CreateTrunc(v, t); break;
        default: break;
    }
    Value* p = b_.CreateInBoundsGEP(t, base(s.buffer), eval_idx(s.addr));
    tag(b_.CreateStore(v, p), s.buffer);
}

Value* KernelEmitter::eval_idx(int i) {
    if (Value* v = lookup(imem_, i)) return v;
    const Idx& x = k_.idx[static_cast<size_t>(i)];
    Value* r = nullptr;
    switch (x.kind) {
        case Idx::kVar: r = vars_[static_cast<size_t>(x.a)]; break;
        case Idx::kConst: r = ci64(x.a); break;
        case Idx::kAdd: r = b_.CreateAdd(eval_idx(static_cast<int>(x.a)), eval_idx(static_cast<int>(x.b)), "", true, true); break;
        case Idx::kMul: r = b_.CreateMul(eval_idx(static_cast<int>(x.a)), ci64(x.b), "", true, true); break;
        case Idx::kDiv: r = b_.CreateUDiv(eval_idx(static_cast<int>(x.a)), ci64(x.b)); break;
        case Idx::kMod: r = b_.CreateURem(eval_idx(static_cast<int>(x.a)), ci64(x.b)); break;
        case Idx::kShift: {  // clamp(a - b, 0, c), in signed arithmetic
            Value* s = b_.CreateSub(eval_idx(static_cast<int>(x.a)), ci64(x.b));
            s = b_.CreateSelect(b_.CreateICmpSLT(s, ci64(0)), ci64(0), s);
            r = b_.CreateSelect(b_.CreateICmpSGT(s, ci64(x.c)), ci64(x.c), s);
            break;
        }
    }
    imem_.back()[i] = r;
    return r;
}

Value* KernelEmitter::eval(int e) {
    if (Value* v = lookup(emem_, e)) return v;
    const Expr& x = k_.exprs[static_cast<size_t>(e)];
    Value* r = nullptr;
    switch (x.kind) {
        case Expr::kConst: r = constant(x.cls, x.f, x.i); break;
        case Expr::kLoad: r = load(x); break;
        case Expr::kReduced: {  // a float64 accumulator of a float32 sum is rounded here
            const Reduction& red = k_.reductions[static_cast<size_t>(x.reduction)];
            r = reduced_[static_cast<size_t>(x.reduction)];
            if (red.acc != x.cls) r = convert(r, red.acc, x.cls);
            break;
        }
        case Expr::kOp: r = apply(x); break;
        case Expr::kInRange: {
            Value* v = eval_idx(x.addr);
            r = b_.CreateAnd(b_.CreateICmpSGE(v, ci64(x.lo)), b_.CreateICmpSLT(v, ci64(x.hi)));
            if (x.step > 1) {
                Value* on_grid = b_.CreateICmpEQ(b_.CreateSRem(b_.CreateSub(v, ci64(x.lo)), ci64(x.step)), ci64(0));
                r = b_.CreateAnd(r, on_grid);
            }
            break;
        }
    }
    emem_.back()[e] = r;
    return r;
}

Value* KernelEmitter::unary(Op op, Value* a, Cls c) {
    const bool fl = c == Cls::kF32 || c == Cls::kF64;
    llvm::Type* t = a->getType();
    auto k = [&](double v) { return llvm::ConstantFP::get(t, v); };
    if (!fl) {
        Value* zero = ci64(0);
        switch (op) {
            case Op::kNeg: return b_.CreateSub(zero, a);
            case Op::kAbs: return b_.CreateSelect(b_.CreateICmpSLT(a, zero), b_.CreateSub(zero, a), a);
            case Op::kRelu: return b_.CreateSelect(b_.CreateICmpSLT(a, zero), zero, a);
            default: return a;  // floating ops on ints were promoted by the graph's rules
        }
    }
    const bool f32v = c == Cls::kF32;
    auto libm = [&](const char* name, Value* x) {
        auto callee = m_.getOrInsertFunction(name, llvm::FunctionType::get(f64(), {f64()}, false));
        return b_.CreateCall(callee, {x});
    };
    auto exp = [&](Value* x) { return f32v ? math_.call(b_, "exp", x) : b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, x); };
    auto tanh = [&](Value* x) { return f32v ? math_.call(b_, "tanh", x) : libm("tanh", x); };
    auto erf = [&](Value* x) { return f32v ? math_.call(b_, "erf", x) : libm("erf", x); };
    auto sigmoid = [&](Value* x) { return b_.CreateFDiv(k(1), b_.CreateFAdd(k(1), exp(b_.CreateFNeg(x)))); };
    switch (op) {
        case Op::kNeg: return b_.CreateFNeg(a);
        case Op::kAbs: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a);
        case Op::kExp: return exp(a);
        case Op::kLog: return f32v ? math_.call(b_, "log", a) : b_.CreateUnaryIntrinsic(llvm::Intrinsic::log, a);
        case Op::kSqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a);
        case Op::kRsqrt: return b_.CreateFDiv(k(1), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a));
        case Op::kReciprocal: return b_.CreateFDiv(k(1), a);
        case Op::kSigmoid: return sigmoid(a);
        case Op::kTanh: return tanh(a);
        case Op::kRelu: return b_.CreateSelect(b_.CreateFCmpOLT(a, k(0)), k(0), a);
        case Op::kSilu: return b_.CreateFMul(a, sigmoid(a));
        case Op::kGelu:
            return b_.CreateFMul(b_.CreateFMul(a, k(0.5)), b_.CreateFAdd(k(1), erf(b_.CreateFMul(a, k(M_SQRT1_2)))));
        case Op::kGeluTanh: {
            Value* inner = b_.CreateFMul(k(0.7978845608028654),
                                         b_.CreateFAdd(a, b_.CreateFMul(k(0.044715), b_.CreateFMul(a, b_.CreateFMul(a, a)))));
            return b_.CreateFMul(b_.CreateFMul(a, k(0.5)), b_.CreateFAdd(k(1), tanh(inner)));
        }
        case Op::kSin: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sin, a);
        case Op::kCos: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::cos, a);
        case Op::kErf: return erf(a);
        default: return a;
    }
}

namespace {
int cls_rank(Cls c) { return c == Cls::kBool ? 1 : static_cast<int>(c); }
}  // namespace

Value* KernelEmitter::apply(const Expr& x) {
    auto argcls = [&](int i) { return k_.exprs[static_cast<size_t>(x.args[i])].cls; };
    auto arg = [&](int i, Cls to) { return convert(eval(x.args[i]), argcls(i), to); };
    switch (op_kind(x.op)) {
        case OpKind::kCast: {
            Value* v = convert_to(eval(x.args[0]), argcls(0), x.dtype);
            switch (x.dtype) {
                case DType::kBFloat16: return round_bf16(b_, v);
                case DType::kFloat16: return b_.CreateFPExt(b_.CreateFPTrunc(v, llvm::Type::getHalfTy(ctx_)), f32());
                case DType::kFloat8E4M3FN: case DType::kFloat8E5M2: return from_f8_bits(b_, to_f8_bits(b_, v, x.dtype), x.dtype);
                case DType::kUInt8: return b_.CreateZExt(b_.CreateTrunc(v, mem_type(x.dtype)), i64());
                case DType::kInt8: case DType::kInt16: case DType::kInt32:
                    return b_.CreateSExt(b_.CreateTrunc(v, mem_type(x.dtype)), i64());
                default: return v;
            }
        }
        case OpKind::kUnary: {
            if (x.op == Op::kNot) return b_.CreateNot(arg(0, Cls::kBool));
            const Cls c = x.cls == Cls::kBool ? Cls::kI64 : x.cls;
            return convert(unary(x.op, arg(0, c), c), c, x.cls);
        }
        case OpKind::kBinary: {
            const Cls c = x.cls == Cls::kBool ? Cls::kI64 : x.cls;
            const bool fl = c == Cls::kF32 || c == Cls::kF64;
            Value* a = arg(0, c);
            const Expr& ex = k_.exprs[static_cast<size_t>(x.args[1])];
            if (x.op == Op::kPow && fl && ex.kind == Expr::kConst) {
                const double p = is_float_cls(ex.cls) ? ex.f : static_cast<double>(ex.i);
                auto k = [&](double v) { return llvm::ConstantFP::get(a->getType(), v); };
                if (p == 1) return a;
                if (p == 2) return b_.CreateFMul(a, a);
                if (p == 3) return b_.CreateFMul(b_.CreateFMul(a, a), a);  // the CPU's order
                if (p == -2) return b_.CreateFDiv(k(1), b_.CreateFMul(a, a));
                // float16 roots follow std::pow at -0 and -inf, as the CPU's float16 kernel does.
                const bool roots = x.dtype != DType::kFloat16;
                if (p == 0.5 && roots) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a);
                if (p == -1) return b_.CreateFDiv(k(1), a);
                if (p == -0.5 && roots) return b_.CreateFDiv(k(1), b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a));
                if (p == 0) return k(1);
            }
            Value* bb = arg(1, c);
            Value* r = nullptr;
            switch (x.op) {
                case Op::kAdd: r = fl ? b_.CreateFAdd(a, bb) : b_.CreateAdd(a, bb); break;
                case Op::kSub: r = fl ? b_.CreateFSub(a, bb) : b_.CreateSub(a, bb); break;
                case Op::kMul: r = fl ? b_.CreateFMul(a, bb) : b_.CreateMul(a, bb); break;
                case Op::kDiv:
                    r = fl ? b_.CreateFDiv(a, bb)
                           : b_.CreateSDiv(a, b_.CreateSelect(b_.CreateICmpEQ(bb, ci64(0)), ci64(1), bb));
                    break;
                case Op::kPow:
                    r = fl ? b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, a, bb)
                           : b_.CreateFPToSI(b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, b_.CreateSIToFP(a, f64()),
                                                                      b_.CreateSIToFP(bb, f64())),
                                             i64());
                    break;
                // NaN propagates; between equal values (-0 and +0) the first operand is kept,
                // as eager mode and the CPU do (llvm.maximum would order -0 below +0).
                case Op::kMaximum:
                    r = fl ? b_.CreateSelect(b_.CreateFCmpUNO(a, bb), b_.CreateFAdd(a, bb),
                                             b_.CreateSelect(b_.CreateFCmpOGT(bb, a), bb, a))
                           : b_.CreateSelect(b_.CreateICmpSGT(a, bb), a, bb);
                    break;
                case Op::kMinimum:
                    r = fl ? b_.CreateSelect(b_.CreateFCmpUNO(a, bb), b_.CreateFAdd(a, bb),
                                             b_.CreateSelect(b_.CreateFCmpOLT(bb, a), bb, a))
                           : b_.CreateSelect(b_.CreateICmpSLT(a, bb), a, bb);
                    break;
                default: r = a;
            }
            return convert(r, c, x.cls);
        }
        case OpKind::kCompare: {
            if (x.op == Op::kAnd) return b_.CreateAnd(arg(0, Cls::kBool), arg(1, Cls::kBool));
            if (x.op == Op::kOr) return b_.CreateOr(arg(0, Cls::kBool), arg(1, Cls::kBool));
            Cls c = cls_rank(argcls(0)) >= cls_rank(argcls(1)) ? argcls(0) : argcls(1);
            if (c == Cls::kBool) c = Cls::kI64;
            Value* a = arg(0, c);
            Value* bb = arg(1, c);
            const bool fl = c == Cls::kF32 || c == Cls::kF64;
            switch (x.op) {
                case Op::kEq: return fl ? b_.CreateFCmpOEQ(a, bb) : b_.CreateICmpEQ(a, bb);
                case Op::kNe: return fl ? b_.CreateFCmpUNE(a, bb) : b_.CreateICmpNE(a, bb);
                case Op::kLt: return fl ? b_.CreateFCmpOLT(a, bb) : b_.CreateICmpSLT(a, bb);
                case Op::kLe: return fl ? b_.CreateFCmpOLE(a, bb) : b_.CreateICmpSLE(a, bb);
                case Op::kGt: return fl ? b_.CreateFCmpOGT(a, bb) : b_.CreateICmpSGT(a, bb);
                case Op::kGe: return fl ? b_.CreateFCmpOGE(a, bb) : b_.CreateICmpSGE(a, bb);
                default: return a;
            }
        }
        case OpKind::kWhere: return b_.CreateSelect(arg(0, Cls::kBool), arg(1, x.cls), arg(2, x.cls));
        default: return constant(x.cls, 0, 0);
    }
}

void KernelEmitter::loop(Value* lo, Value* hi, const std::function<void(Value*)>& body) {
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "loop", fn_);
    auto* bodyb = llvm::BasicBlock::Create(ctx_, "body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* i = b_.CreatePHI(i64(), 2);
    i->addIncoming(lo, pre);
    b_.CreateCondBr(b_.CreateICmpSLT(i, hi), bodyb, exit);
    b_.SetInsertPoint(bodyb);
    body(i);
    i->addIncoming(b_.CreateAdd(i, ci64(1), "", true, true), b_.GetInsertBlock());
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
}

// `flush`, when given, runs after every block of at most kSumBlock iterations of the innermost
// loop (and after the body when there is no inner loop).
void KernelEmitter::inner_nest(size_t level, const std::function<void()>& body, const std::function<void()>& flush) {
    if (level == k_.inner.size()) {
        body();
        if (flush && level == 0) flush();
        return;
    }
    const size_t no = k_.outer.size();
    Value* hi = ci64(k_.inner[level]);
    const bool innermost = level + 1 == k_.inner.size();
    if (k_.tail > 0 && innermost) {
        Value* rem = b_.CreateSub(ci64(k_.tail), b_.CreateMul(vars_[no - 1], ci64(k_.inner[level])));
        hi = b_.CreateSelect(b_.CreateICmpSLT(rem, hi), rem, hi);
    }
    if (innermost && flush) {
        Value* blocks = b_.CreateSDiv(b_.CreateAdd(hi, ci64(kSumBlock - 1)), ci64(kSumBlock));
        loop(ci64(0), blocks, [&](Value* j) {
            Value* lo = b_.CreateMul(j, ci64(kSumBlock));
            Value* end = b_.CreateAdd(lo, ci64(kSumBlock));
            end = b_.CreateSelect(b_.CreateICmpSLT(end, hi), end, hi);
            loop(lo, end, [&](Value* i) {
                vars_[no + level] = i;
                body();
            });
            flush();
        });
        return;
    }
    loop(ci64(0), hi, [&](Value* i) {
        vars_[no + level] = i;
        inner_nest(level + 1, body, flush);
    });
}

Value* KernelEmitter::reduce_init(const Reduction& red) {
    const bool fl = is_float_cls(red.acc);
    const double inf = std::numeric_limits<double>::infinity();
    switch (red.op) {
        case Op::kProd: return constant(red.acc, 1, 1);
        case Op::kAmax: return fl ? constant(red.acc, -inf, 0) : ci64(std::numeric_limits<int64_t>::min());
        case Op::kAmin: return fl ? constant(red.acc, inf, 0) : ci64(std::numeric_limits<int64_t>::max());
        default: return constant(red.acc, 0, 0);
    }
}

Value* KernelEmitter::reduce_finish(const Reduction& red, Value* acc_ptr) {
    Value* v = b_.CreateLoad(cls_type(red.acc), acc_ptr);
    if (red.op == Op::kMean) {
        if (!is_float_cls(red.acc)) v = convert(v, red.acc, Cls::kF32);
        v = b_.CreateFDiv(v, llvm::ConstantFP::get(v->getType(), static_cast<double>(red.count)));
    }
    return v;
}

// Column form: the reductions of the phases done so far, read back for lane j.
void KernelEmitter::set_lane(Value* j) {
    vars_[k_.outer.size() - 1] = b_.CreateAdd(col_, j, "", true, true);
    for (size_t r = 0; r < lane_accs_.size(); ++r) {
        if (!lane_accs_[r]) continue;
        const Reduction& red = k_.reductions[r];
        reduced_[r] = reduce_finish(red, b_.CreateInBoundsGEP(cls_type(red.acc), lane_accs_[r], j));
    }
}

// Row form: one accumulator per reduction, the inner nest innermost. Column form (lanes_ > 0):
// an array of lanes_ accumulators per reduction, and inside the inner nest a loop over up to
// lanes_ consecutive values of the last outer var, which LLVM vectorizes when that var is the
// contiguous one (sums over leading dims).
void KernelEmitter::emit_phase(const Phase& p) {
    std::vector<Value*> accs;
    // Row form, a float32 sum kept in float64 (fuse.cc's long sums): the loop adds into a float32
    // block sum, which is added to the float64 total every kSumBlock values, so the inner loop
    // stays float32 (and vectorizes with the value's arithmetic) and the error stays bounded.
    std::vector<Value*> block(p.reductions.size(), nullptr);
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    for (int r : p.reductions) {
        const Reduction& red = k_.reductions[static_cast<size_t>(r)];
        llvm::Type* t = cls_type(red.acc);
        if (!lanes_) {
            accs.push_back(eb.CreateAlloca(t));
            b_.CreateStore(reduce_init(red), accs.back());
            if (red.acc == Cls::kF64 && k_.exprs[static_cast<size_t>(red.expr)].cls == Cls::kF32 &&
                (red.op == Op::kSum || red.op == Op::kMean)) {
                block[accs.size() - 1] = eb.CreateAlloca(f32());
                b_.CreateStore(constant(Cls::kF32, 0, 0), block[accs.size() - 1]);
            }
            continue;
        }
        accs.push_back(eb.CreateAlloca(llvm::ArrayType::get(t, static_cast<uint64_t>(lanes_))));
        loop(ci64(0), cnt_, [&](Value* j) { b_.CreateStore(reduce_init(red), b_.CreateInBoundsGEP(t, accs.back(), j)); });
    }
    auto body = [&](Value* j) {
        push_scope();
        if (j) set_lane(j);
        std::vector<Value*> vals;
        for (const Store& s : p.stores) vals.push_back(eval(s.expr));
        for (size_t i = 0; i < p.reductions.size(); ++i) {
            const Reduction& red = k_.reductions[static_cast<size_t>(p.reductions[i])];
            const Cls acc_cls = block[i] ? Cls::kF32 : red.acc;
            Value* v = convert(eval(red.expr), k_.exprs[static_cast<size_t>(red.expr)].cls, acc_cls);
            Value* acc = block[i] ? block[i] : j ? b_.CreateInBoundsGEP(cls_type(red.acc), accs[i], j) : accs[i];
            Value* cur = b_.CreateLoad(cls_type(acc_cls), acc);
            const bool fl = is_float_cls(acc_cls);
            Value* next = nullptr;
            const bool mx = red.op == Op::kAmax;
            switch (red.op) {
                case Op::kAmax: case Op::kAmin:
                    next = fl ? b_.CreateBinaryIntrinsic(mx ? llvm::Intrinsic::maximum : llvm::Intrinsic::minimum, cur, v)
                              : b_.CreateSelect(mx ? b_.CreateICmpSGT(v, cur) : b_.CreateICmpSLT(v, cur), v, cur);
                    break;
                case Op::kProd: next = fl ? b_.CreateFMul(cur, v) : b_.CreateMul(cur, v); break;
                default: next = fl ? b_.CreateFAdd(cur, v) : b_.CreateAdd(cur, v);
            }
            // Reassociation lets the vectorizer keep one partial sum per lane (row form; the
            // column form's lanes are separate accumulators already).
            if (auto* inst = llvm::dyn_cast<llvm::Instruction>(next); inst && fl && llvm::isa<llvm::FPMathOperator>(inst))
                inst->setHasAllowReassoc(true);
            b_.CreateStore(next, acc);
        }
        for (size_t i = 0; i < p.stores.size(); ++i)
            store(p.stores[i], vals[i], k_.exprs[static_cast<size_t>(p.stores[i].expr)].cls);
        pop_scope();
    };
    std::function<void()> flush;
    if (std::any_of(block.begin(), block.end(), [](Value* v) { return v != nullptr; })) {
        flush = [&] {
            for (size_t i = 0; i < block.size(); ++i) {
                if (!block[i]) continue;
                Value* part = b_.CreateFPExt(b_.CreateLoad(f32(), block[i]), f64());
                b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(f64(), accs[i]), part), accs[i]);
                b_.CreateStore(constant(Cls::kF32, 0, 0), block[i]);
            }
        };
    }
    if (!p.stores.empty() || !p.reductions.empty()) {
        inner_nest(0, [&] {
            if (lanes_) loop(ci64(0), cnt_, body);
            else body(nullptr);
        }, flush);
    }
    if (lanes_) {
        for (size_t i = 0; i < p.reductions.size(); ++i) lane_accs_[static_cast<size_t>(p.reductions[i])] = accs[i];
        if (p.post.empty()) return;
        loop(ci64(0), cnt_, [&](Value* j) {
            push_scope();
            set_lane(j);
            for (const Store& s : p.post) store(s, eval(s.expr), k_.exprs[static_cast<size_t>(s.expr)].cls);
            pop_scope();
        });
        return;
    }
    for (size_t i = 0; i < p.reductions.size(); ++i) {
        const Reduction& red = k_.reductions[static_cast<size_t>(p.reductions[i])];
        reduced_[static_cast<size_t>(p.reductions[i])] = reduce_finish(red, accs[i]);
    }
    for (const Store& s : p.post) store(s, eval(s.expr), k_.exprs[static_cast<size_t>(s.expr)].cls);
}


void KernelEmitter::emit() {
    llvm::Type* ptr = llvm::PointerType::getUnqual(ctx_);
    auto* ft = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx_), {ptr, i64(), i64()}, false);
    fn_ = llvm::Function::Create(ft, llvm::Function::ExternalLinkage, k_.name, m_);
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    fn_->addFnAttr("target-cpu", tm_.getTargetCPU());
    fn_->addFnAttr("target-features", tm_.getTargetFeatureString());
    // LLVM keeps to 256-bit vectors on AVX-512 CPUs unless told otherwise (older parts lowered
    // their clocks for 512-bit code). On the machines this runs on, 512 bits made exp/erf-heavy
    // kernels 15-25% faster (softmax 2.05 -> 1.55 ms, gelu 3.1 -> 2.5 ms, 4096 x 1024 float32).
    if (tm_.getTargetFeatureString().contains("+avx512f")) fn_->addFnAttr("prefer-vector-width", "512");
    fn_->addParamAttr(0, llvm::Attribute::NoAlias);
    entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
    auto* start = llvm::BasicBlock::Create(ctx_, "start", fn_);
    b_.SetInsertPoint(entry_);
    b_.CreateBr(start);
    b_.SetInsertPoint(start);
    buffers_ = fn_->getArg(0);

    llvm::MDBuilder mdb(ctx_);
    llvm::MDNode* domain = mdb.createAliasScopeDomain(k_.name);
    auto add_scope = [&](int b) {
        if (!scopes_.count(b)) scopes_[b] = mdb.createAliasScope("b" + std::to_string(b), domain);
    };
    for (const Expr& x : k_.exprs)
        if (x.kind == Expr::kLoad) add_scope(x.buffer);
    for (const Phase& p : k_.phases)
        for (const auto* v : {&p.stores, &p.post})
            for (const Store& s : *v) add_scope(s.buffer);

    vars_.assign(k_.outer.size() + k_.inner.size(), nullptr);
    reduced_.assign(k_.reductions.size(), nullptr);
    auto outer_vars = [&](Value* r) {
        int64_t stride = 1;
        for (size_t d = k_.outer.size(); d-- > 0;) {
            Value* q = stride == 1 ? r : b_.CreateUDiv(r, ci64(stride));
            vars_[d] = (d == 0 || k_.outer[d] == 1) ? (k_.outer[d] == 1 ? ci64(0) : q) : b_.CreateURem(q, ci64(k_.outer[d]));
            stride *= std::max<int64_t>(1, k_.outer[d]);
        }
    };
    lanes_ = column_lanes(k_);
    if (!lanes_) {
        loop(fn_->getArg(1), fn_->getArg(2), [&](Value* r) {
            push_scope();
            outer_vars(r);
            for (const Phase& p : k_.phases) emit_phase(p);
            pop_scope();
        });
        b_.CreateRetVoid();
        return;
    }
    // Column form: blocks of up to lanes_ outer indices that share all but the last outer var.
    Value* end = fn_->getArg(2);
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(ctx_, "block", fn_);
    auto* bodyb = llvm::BasicBlock::Create(ctx_, "block.body", fn_);
    auto* exit = llvm::BasicBlock::Create(ctx_, "block.exit", fn_);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* r = b_.CreatePHI(i64(), 2);
    r->addIncoming(fn_->getArg(1), pre);
    b_.CreateCondBr(b_.CreateICmpSLT(r, end), bodyb, exit);
    b_.SetInsertPoint(bodyb);
    push_scope();
    outer_vars(r);
    col_ = vars_[k_.outer.size() - 1];
    auto smin = [&](Value* a, Value* b) { return b_.CreateSelect(b_.CreateICmpSLT(a, b), a, b); };
    cnt_ = smin(smin(ci64(lanes_), b_.CreateSub(end, r)), b_.CreateSub(ci64(k_.outer.back()), col_));
    lane_accs_.assign(k_.reductions.size(), nullptr);
    for (const Phase& p : k_.phases) emit_phase(p);
    pop_scope();
    r->addIncoming(b_.CreateAdd(r, cnt_, "", true, true), b_.GetInsertBlock());
    b_.CreateBr(header);
    b_.SetInsertPoint(exit);
    b_.CreateRetVoid();
}

}  // namespace

StatusOr<ObjectCode> emit_object(const Plan& plan, bool want_ir_text) {
    jit::initialize_llvm();
    ObjectCode out;
    auto t0 = std::chrono::steady_clock::now();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) return internal_error("llvm: cannot detect the host target: " + llvm::toString(jtmb.takeError()));
    jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
    jtmb->setRelocationModel(llvm::Reloc::PIC_);
    auto tm = jtmb->createTargetMachine();
    if (!tm) return internal_error("llvm: cannot create a target machine: " + llvm::toString(tm.takeError()));

    llvm::LLVMContext ctx;
    llvm::Module module("ember", ctx);
    module.setDataLayout((*tm)->createDataLayout());
    module.setTargetTriple((*tm)->getTargetTriple().str());
    Math math(module);
    for (const Kernel& k : plan.kernels) KernelEmitter(module, math, k, **tm).emit();
    std::string verify_msg;
    llvm::raw_string_ostream vos(verify_msg);
    if (llvm::verifyModule(module, &vos)) return internal_error("llvm: generated IR is invalid: " + verify_msg);
    out.emit_ms = ms_since(t0);

    t0 = std::chrono::steady_clock::now();
    {
        llvm::LoopAnalysisManager lam;
        llvm::FunctionAnalysisManager fam;
        llvm::CGSCCAnalysisManager cgam;
        llvm::ModuleAnalysisManager mam;
        llvm::PipelineTuningOptions pto;
        pto.LoopVectorization = true;
        pto.SLPVectorization = true;
        llvm::PassBuilder pb(tm->get(), pto);
        pb.registerModuleAnalyses(mam);
        pb.registerCGSCCAnalyses(cgam);
        pb.registerFunctionAnalyses(fam);
        pb.registerLoopAnalyses(lam);
        pb.crossRegisterProxies(lam, fam, cgam, mam);
        llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
        mpm.run(module, mam);
    }
    out.opt_ms = ms_since(t0);
    if (want_ir_text) {
        llvm::raw_string_ostream os(out.ir_text);
        module.print(os, nullptr);
    }

    t0 = std::chrono::steady_clock::now();
    llvm::SmallVector<char, 0> buffer;
    {
        llvm::raw_svector_ostream os(buffer);
        llvm::legacy::PassManager pm;
        if ((*tm)->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
            return internal_error("llvm: the target cannot emit object files");
        pm.run(module);
    }
    out.object.assign(buffer.begin(), buffer.end());
    out.mc_ms = ms_since(t0);
    return out;
}

}  // namespace ember::compiler::codegen
