#include "elementwise_iter.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/TypeCast.h>

#include <cstring>
#include <memory>
#include <vector>

#include "../context.h"

namespace ember::torch_glue {
namespace {

struct LoopState {
    kernels::ElementwiseLoop loop;
    // Values of 0-dim CPU operands (Python scalars), copied now: the kernel runs later.
    alignas(16) char scalars[kernels::kMaxOperands][16] = {};
    std::vector<at::Tensor> casts;  // device operands cast to the computation's dtype, kept alive
};

// `round_scalars`: a Python number (or other 0-dim CPU operand) of another dtype than a float16 or
// bfloat16 computation is first rounded to that dtype, as the CPU's TensorIterator casts it
// (x.half() % 2.3 divides by 2.30078). The CPU's mul, div and lerp keep the number's full
// value, so they pass false.
std::shared_ptr<LoopState> make_loop(at::TensorIteratorBase& iter, bool round_scalars = true) {
    auto st = std::make_shared<LoopState>();
    auto& loop = st->loop;
    const int nd = iter.ndim();
    TORCH_CHECK(nd <= kernels::kMaxLoopDims, "ember: too many dimensions for an elementwise loop");
    TORCH_CHECK(iter.ntensors() <= kernels::kMaxOperands, "ember: too many operands");
    loop.ndim = nd;
    loop.nops = iter.ntensors();
    // TensorIterator's dimension 0 is the fastest moving; the engine's is the last.
    for (int d = 0; d < nd; ++d) loop.shape[nd - 1 - d] = iter.shape()[d];
    const at::ScalarType common = iter.common_dtype();
    const bool narrow_int = common == at::kByte || common == at::kChar || common == at::kShort || common == at::kInt;
    for (int k = 0; k < loop.nops; ++k) {
        if (iter.is_cpu_scalar(k)) {
            // A Python int in [2^63, 2^64) arrives as a uint64 scalar, a dtype the device does not
            // hold: it is cast to the computation's dtype, wrapping as the CPU does.
            const bool foreign = !has_dtype(iter.dtype(k)) && has_dtype(common);
            if (foreign && (common == at::kLong || common == at::kFloat || common == at::kDouble)) {
                auto store = [&](auto v) { std::memcpy(st->scalars[k], &v, sizeof(v)); };
                const void* src = iter.data_ptr(k);
                if (common == at::kLong) store(c10::fetch_and_cast<int64_t>(iter.dtype(k), src));
                else if (common == at::kFloat) store(c10::fetch_and_cast<float>(iter.dtype(k), src));
                else store(c10::fetch_and_cast<double>(iter.dtype(k), src));
                loop.dtype[k] = to_dtype(common);
                loop.data[k] = st->scalars[k];
                continue;
            }
            if (!foreign) loop.dtype[k] = to_dtype(iter.dtype(k));
            if (k >= iter.noutputs() && iter.dtype(k) != common &&
                ((round_scalars && (common == at::kHalf || common == at::kBFloat16)) || narrow_int || foreign)) {
                // A Python int with a narrower integer computation wraps to its dtype first, as
                // the CPU casts it (uint8 % 300 is uint8 % 44, -3 with uint8 is 253): the kernels
                // compute narrow integers in int64 and would otherwise use the unwrapped value.
                auto store = [&](auto v) { std::memcpy(st->scalars[k], &v, sizeof(v)); };
                const void* src = iter.data_ptr(k);
                switch (common) {
                    case at::kHalf: store(c10::fetch_and_cast<c10::Half>(iter.dtype(k), src)); break;
                    case at::kBFloat16: store(c10::fetch_and_cast<c10::BFloat16>(iter.dtype(k), src)); break;
                    case at::kByte: store(c10::fetch_and_cast<uint8_t>(iter.dtype(k), src)); break;
                    case at::kChar: store(c10::fetch_and_cast<int8_t>(iter.dtype(k), src)); break;
                    case at::kShort: store(c10::fetch_and_cast<int16_t>(iter.dtype(k), src)); break;
                    default: store(c10::fetch_and_cast<int32_t>(iter.dtype(k), src)); break;
                }
                loop.dtype[k] = to_dtype(common);
            } else {
                std::memcpy(st->scalars[k], iter.data_ptr(k), c10::elementSize(iter.dtype(k)));
            }
            loop.data[k] = st->scalars[k];
            continue;  // strides stay 0
        }
        if (k >= iter.noutputs() && iter.dtype(k) != common && iter.tensor_base(k).numel() == 1) {
            // A single-element device operand of another dtype (a 0-dim tensor, which does not
            // promote) is cast to the computation's dtype first, as the CPU casts its inputs:
            // int8 < tensor(300) compares with 44, bfloat16 + tensor(1.001) adds 1.0. The kernels
            // would read it at full width. Exact casts (a narrower operand) need none.
            if (narrow_int || (round_scalars && (common == at::kHalf || common == at::kBFloat16))) {
                at::Tensor cast = at::Tensor(iter.tensor_base(k)).to(common);
                st->casts.push_back(cast);
                loop.dtype[k] = to_dtype(common);
                loop.data[k] = static_cast<char*>(cast.data_ptr());
                continue;  // strides stay 0: one element, broadcast
            }
        }
        loop.dtype[k] = to_dtype(iter.dtype(k));
        loop.data[k] = static_cast<char*>(iter.data_ptr(k));
        auto strides = iter.strides(k);
        for (int d = 0; d < nd; ++d) loop.strides[k][nd - 1 - d] = strides[d];
    }
    return st;
}

runtime::Device& iter_device(at::TensorIteratorBase& iter) {
    return device_for(iter.device(0).index());
}

}  // namespace

kernels::Scalar to_kernel_scalar(const c10::Scalar& v) {
    kernels::Scalar s;
    if (v.isFloatingPoint()) {
        s.kind = kernels::Scalar::Kind::kFloat;
        s.f = v.toDouble();
    } else {
        s.kind = v.isBoolean() ? kernels::Scalar::Kind::kBool : kernels::Scalar::Kind::kInt;
        s.i = v.toLong();
    }
    return s;
}

kernels::Scalar alpha_scalar(const c10::Scalar& alpha, c10::ScalarType compute) {
    kernels::Scalar s = to_kernel_scalar(alpha);
    if (s.kind == kernels::Scalar::Kind::kFloat) {
        if (compute == at::kHalf) s.f = static_cast<float>(c10::Half(static_cast<float>(s.f)));
        if (compute == at::kBFloat16) s.f = static_cast<float>(c10::BFloat16(static_cast<float>(s.f)));
    }
    return s;
}

bool native_compute(const at::TensorIteratorBase& iter, bool integers, bool allow_bool) {
    if (iter.ndim() > kernels::kMaxLoopDims) return false;  // dims that would not coalesce
    // A real computation with a complex out= (or input): the kernels move real values only.
    for (int i = 0; i < iter.ntensors(); ++i)
        if (at::isComplexType(iter.dtype(i))) return false;
    // An out= of a wider dtype than the computation's: the CPU rounds (or wraps) each result to
    // the computation dtype first (float16 33000 + 33000 is inf even into a float64 out=), while
    // the kernels compute float16 in float and int8 in int64 and would store the wider value.
    const at::ScalarType common = iter.common_dtype(), out = iter.dtype(0);
    if (out != common && out != at::kBool &&
        (common == at::kHalf || common == at::kBFloat16 || common == at::kByte || common == at::kChar ||
         common == at::kShort || common == at::kInt))
        return false;
    switch (iter.common_dtype()) {
        case at::kFloat: case at::kDouble: case at::kBFloat16: case at::kHalf:
            return true;
        case at::kByte: case at::kChar: case at::kShort: case at::kInt: case at::kLong:
            return integers;
        case at::kBool:
            return allow_bool;
        default:
            return false;
    }
}

void queue_unary(kernels::UnaryOp op, at::TensorIteratorBase& iter) {
    if (iter.numel() == 0) return;
    c10::DeviceGuard guard(iter.device(0));
    runtime::Device& dev = iter_device(iter);
    auto st = make_loop(iter);
    kernels::DType compute = to_dtype(iter.common_dtype());
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), kernels::op_name(op),
            [st, op, compute, pool] { return kernels::unary(op, st->loop, compute, pool); });
}

void queue_binary(kernels::BinaryOp op, at::TensorIteratorBase& iter, const c10::Scalar& alpha) {
    if (iter.numel() == 0) return;
    c10::DeviceGuard guard(iter.device(0));
    runtime::Device& dev = iter_device(iter);
    auto st = make_loop(iter, op != kernels::BinaryOp::kMul && op != kernels::BinaryOp::kDiv);
    kernels::DType compute = to_dtype(iter.common_dtype());
    kernels::Scalar a = alpha_scalar(alpha, iter.common_dtype());
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), kernels::op_name(op),
            [st, op, compute, a, pool] { return kernels::binary(op, st->loop, compute, a, pool); });
}

void queue_special(kernels::SpecialOp op, at::TensorIteratorBase& iter, int64_t order) {
    if (iter.numel() == 0) return;
    c10::DeviceGuard guard(iter.device(0));
    runtime::Device& dev = iter_device(iter);
    auto st = make_loop(iter);
    kernels::DType compute = to_dtype(iter.common_dtype());
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), kernels::op_name(op),
            [st, op, compute, order, pool] { return kernels::special(op, st->loop, compute, order, pool); });
}

}  // namespace ember::torch_glue

namespace ember::torch_glue {

void queue_ternary(kernels::TernaryOp op, at::TensorIteratorBase& iter, const c10::Scalar& value,
                   std::optional<c10::ScalarType> compute_type) {
    if (iter.numel() == 0) return;
    c10::DeviceGuard guard(iter.device(0));
    runtime::Device& dev = device_for(iter.device(0).index());
    // lerp's scalar weight keeps its full value, as the CPU's lerp kernel takes it.
    auto st = make_loop(iter, op != kernels::TernaryOp::kLerp);
    kernels::DType compute = to_dtype(compute_type.value_or(iter.common_dtype()));
    kernels::Scalar v = to_kernel_scalar(value);
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), kernels::op_name(op),
            [st, op, compute, v, pool] { return kernels::ternary(op, st->loop, compute, v, pool); });
}

}  // namespace ember::torch_glue
