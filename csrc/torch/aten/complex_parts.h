// Complex tensors on ember are computed from their real and imaginary parts: the elementwise
// engine, the reductions and the GEMM take real types, so each complex op here is composed from
// real ember ops on (re, im) views (complex64 as float32 pairs, complex128 as float64 pairs).
// Spectral models (Fourier neural operators, spectrogram losses) and complex rotary embeddings
// use these. Each function returns std::nullopt for arguments it does not serve (complex32, a
// tensor on another device, a real result type); the caller then takes its usual path, which
// ends at the CPU fallback for complex inputs.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <utility>

namespace ember::torch_glue {

// A complex64/complex128 tensor on an ember device (0-d CPU tensors, i.e. Python numbers, count
// as operands alongside one).
bool complex_on_device(const at::Tensor& t);

// (re, im) of `t` as real tensors: views for a complex tensor (a lazily conjugated one is read
// through its base with the imaginary part negated); {t, undefined} for a real operand.
std::pair<at::Tensor, at::Tensor> re_im(const at::Tensor& t);

// The complex tensor with parts re and im (broadcast to one shape), contiguous.
at::Tensor from_parts(const at::Tensor& re, const at::Tensor& im);

// Writes `value` (complex) into `out` as an out= op does (resized; same dtype required).
at::Tensor& write_out(at::Tensor& out, const at::Tensor& value);

// Whether an in-place complex op on `self` may be computed whole and written back: `other` does
// not share memory with self, or is self itself. A partly overlapping operand (x[:, 1:] +=
// x[:, :-1]) takes the CPU's path, whose element order decides the result.
bool writable_in_place(const at::Tensor& self, const at::Tensor& other);

// self + alpha * other (subtract: self - alpha * other) with a complex result.
std::optional<at::Tensor> complex_add(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha,
                                      bool subtract);

// self * other with a complex result: (a + bi)(c + di) = (ac - bd) + (ad + bc)i. Rotary
// embeddings written with complex numbers (Llama 4, DeepSeek-V2) use it.
std::optional<at::Tensor> complex_mul(const at::Tensor& self, const at::Tensor& other);

// self / other with a complex result.
std::optional<at::Tensor> complex_div(const at::Tensor& self, const at::Tensor& other);

// neg, exp, log, sqrt, reciprocal, sgn (complex results) and abs, angle (real results) of a
// complex tensor; `name` is the ATen op's name.
std::optional<at::Tensor> complex_unary(const char* name, const at::Tensor& self);

// a @ b (2-d) or the batched product (3-d): four real products.
std::optional<at::Tensor> complex_matmul(const at::Tensor& a, const at::Tensor& b);

// self == other (ne: !=) for complex operands: both parts equal.
std::optional<at::Tensor> complex_equal(const at::Tensor& self, const at::Tensor& other, bool ne);

// sum / mean over `dims` (empty: every dim) of a complex tensor.
std::optional<at::Tensor> complex_reduce(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                                         std::optional<at::ScalarType> dtype, bool mean);

}  // namespace ember::torch_glue
