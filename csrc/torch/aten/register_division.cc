// The division family on core's elementwise engine: floor_divide, div with a rounding mode,
// remainder and fmod, each in its functional, in-place and out= form.
#include <ATen/Operators.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "../fallback.h"
#include "elementwise_iter.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

using kernels::BinaryOp;
using at::TensorIterator;

// Integers compute exactly (a division by zero fails like CPU's ZeroDivisionError); bool
// inputs take the CPU path, which refuses them as the CPU does.

// bfloat16/float16 floor and trunc division round differently on the CPU's vector path; those
// two run there, so results stay bit-identical.
bool division_native(BinaryOp op, const at::TensorIteratorBase& iter) {
    const auto t = iter.common_dtype();
    const bool reduced = t == at::kBFloat16 || t == at::kHalf;
    return native_compute(iter, true) &&
           !(reduced && (op == BinaryOp::kFloorDivide || op == BinaryOp::kTruncDivide));
}

at::Tensor& division_out(BinaryOp op, const at::Tensor& self, const at::Tensor& other, at::Tensor& out,
                         bool& native) {
    auto iter = TensorIterator::binary_op(out, self, other);
    native = division_native(op, iter);
    if (native) queue_binary(op, iter);
    return out;
}

at::Tensor division(BinaryOp op, const at::Tensor& self, const at::Tensor& other, bool& native) {
    at::Tensor out;
    auto iter = TensorIterator::binary_op(out, self, other);
    native = division_native(op, iter);
    if (!native) return at::Tensor();
    queue_binary(op, iter);
    return iter.output();
}

#define EMBER_DIVISION_OP(name, kOp, FunctionalOp)                                                  \
    at::Tensor name##_tensor(const at::Tensor& self, const at::Tensor& other) {                     \
        bool native;                                                                                \
        at::Tensor out = division(kOp, self, other, native);                                        \
        return native ? out : cpu<FunctionalOp>(self, other);                                       \
    }                                                                                               \
    at::Tensor& name##__tensor(at::Tensor& self, const at::Tensor& other) {                         \
        bool native;                                                                                \
        division_out(kOp, self, other, self, native);                                               \
        return native ? self : cpu<ATEN_OP2(name##_, Tensor)>(self, other);                        \
    }                                                                                               \
    at::Tensor name##_scalar(const at::Tensor& self, const c10::Scalar& other) {                    \
        return name##_tensor(self, at::native::wrapped_scalar_tensor(other));                                           \
    }                                                                                               \
    at::Tensor& name##__scalar(at::Tensor& self, const c10::Scalar& other) {                        \
        return name##__tensor(self, at::native::wrapped_scalar_tensor(other));                                          \
    }

EMBER_DIVISION_OP(floor_divide, BinaryOp::kFloorDivide, ATEN_OP(floor_divide))
EMBER_DIVISION_OP(remainder, BinaryOp::kRemainder, ATEN_OP2(remainder, Tensor))
EMBER_DIVISION_OP(fmod, BinaryOp::kFmod, ATEN_OP2(fmod, Tensor))
#undef EMBER_DIVISION_OP

at::Tensor& floor_divide_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    bool native;
    division_out(BinaryOp::kFloorDivide, self, other, out, native);
    return native ? out : cpu<ATEN_OP2(floor_divide, out)>(self, other, out);
}

at::Tensor& remainder_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    bool native;
    division_out(BinaryOp::kRemainder, self, other, out, native);
    return native ? out : cpu<ATEN_OP2(remainder, Tensor_out)>(self, other, out);
}

at::Tensor& fmod_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    bool native;
    division_out(BinaryOp::kFmod, self, other, out, native);
    return native ? out : cpu<ATEN_OP2(fmod, Tensor_out)>(self, other, out);
}

at::Tensor div_mode(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode) {
    if (!mode) return at::div(self, other);
    TORCH_CHECK(*mode == "trunc" || *mode == "floor", "div expected rounding_mode to be one of None, 'trunc', "
                "or 'floor' but found '", *mode, "'");
    bool native;
    at::Tensor out = division(*mode == "floor" ? BinaryOp::kFloorDivide : BinaryOp::kTruncDivide, self, other, native);
    return native ? out : cpu<ATEN_OP2(div, Tensor_mode)>(self, other, mode);
}

at::Tensor& div__mode(at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode) {
    if (!mode) return self.div_(other);
    TORCH_CHECK(*mode == "trunc" || *mode == "floor", "div expected rounding_mode to be one of None, 'trunc', "
                "or 'floor' but found '", *mode, "'");
    bool native;
    division_out(*mode == "floor" ? BinaryOp::kFloorDivide : BinaryOp::kTruncDivide, self, other, self, native);
    return native ? self : cpu<ATEN_OP2(div_, Tensor_mode)>(self, other, mode);
}

at::Tensor& div_out_mode(const at::Tensor& self, const at::Tensor& other, std::optional<c10::string_view> mode,
                         at::Tensor& out) {
    if (!mode) return at::div_out(out, self, other);
    TORCH_CHECK(*mode == "trunc" || *mode == "floor", "div expected rounding_mode to be one of None, 'trunc', "
                "or 'floor' but found '", *mode, "'");
    bool native;
    division_out(*mode == "floor" ? BinaryOp::kFloorDivide : BinaryOp::kTruncDivide, self, other, out, native);
    return native ? out : cpu<ATEN_OP2(div, out_mode)>(self, other, mode, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("floor_divide", floor_divide_tensor);
    m.impl("floor_divide_.Tensor", floor_divide__tensor);
    m.impl("floor_divide.Scalar", floor_divide_scalar);
    m.impl("floor_divide_.Scalar", floor_divide__scalar);
    m.impl("floor_divide.out", floor_divide_out);
    m.impl("remainder.Tensor", remainder_tensor);
    m.impl("remainder_.Tensor", remainder__tensor);
    m.impl("remainder.Scalar", remainder_scalar);
    m.impl("remainder_.Scalar", remainder__scalar);
    m.impl("remainder.Tensor_out", remainder_out);
    m.impl("fmod.Tensor", fmod_tensor);
    m.impl("fmod_.Tensor", fmod__tensor);
    m.impl("fmod.Scalar", fmod_scalar);
    m.impl("fmod_.Scalar", fmod__scalar);
    m.impl("fmod.Tensor_out", fmod_out);
    m.impl("div.Tensor_mode", div_mode);
    m.impl("div_.Tensor_mode", div__mode);
    m.impl("div.out_mode", div_out_mode);
}

}  // namespace ember::torch_glue
