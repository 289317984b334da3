#include "kernels/fill.h"

#include <cstring>

#include "kernels/dispatch.h"
#include "kernels/strided_loop.h"

namespace ember::kernels {

Status fill(const TensorView& dst, const Scalar& value, runtime::ThreadPool* pool) {
    if (is_complex(dst.dtype)) return unimplemented("fill of complex tensors");
    if (dst.numel() == 0) return Status();
    // Convert once; every element then receives the same bytes.
    alignas(16) char pattern[16] = {};
    EMBER_DISPATCH_REAL(dst.dtype, {
        scalar_t v;
        switch (value.kind) {
            case Scalar::Kind::kBool: v = detail::convert<scalar_t>(value.i != 0); break;
            case Scalar::Kind::kInt: v = detail::convert<scalar_t>(value.i); break;
            default: v = detail::convert<scalar_t>(value.f); break;
        }
        std::memcpy(pattern, &v, sizeof(v));
    });
    const TensorView* ops[1] = {&dst};
    detail::Loop loop = detail::make_loop(ops, 1);
    EMBER_DISPATCH_REAL(dst.dtype, {
        scalar_t v;
        std::memcpy(&v, pattern, sizeof(v));
        detail::for_each_row(loop, static_cast<char*>(dst.data), nullptr, pool,
                             [v](char* d, char*, int64_t n, int64_t ds, int64_t) {
                                 auto* out = reinterpret_cast<scalar_t*>(d);
                                 if (ds == static_cast<int64_t>(sizeof(scalar_t))) {
                                     for (int64_t i = 0; i < n; ++i) out[i] = v;
                                 } else {
                                     for (int64_t i = 0; i < n; ++i) *reinterpret_cast<scalar_t*>(d + i * ds) = v;
                                 }
                             });
    });
    return Status();
}

Status arange(const TensorView& dst, const Scalar& start, const Scalar& step, runtime::ThreadPool* pool) {
    if (dst.ndim != 1) return invalid_argument("arange: output must be 1-d");
    if (is_complex(dst.dtype)) return unimplemented("arange of complex tensors");
    const int64_t n = dst.sizes[0], stride = dst.strides[0];
    auto as_double = [](const Scalar& s) { return s.kind == Scalar::Kind::kFloat ? s.f : static_cast<double>(s.i); };
    auto as_int = [](const Scalar& s) { return s.kind == Scalar::Kind::kFloat ? static_cast<int64_t>(s.f) : s.i; };
    EMBER_DISPATCH_REAL(dst.dtype, {
        auto* out = static_cast<scalar_t*>(dst.data);
        auto body = [&](int64_t b, int64_t e) {
            if constexpr (std::is_integral_v<scalar_t>) {
                int64_t s0 = as_int(start), st = as_int(step);
                for (int64_t i = b; i < e; ++i) out[i * stride] = static_cast<scalar_t>(s0 + i * st);
            } else {
                double s0 = as_double(start), st = as_double(step);
                for (int64_t i = b; i < e; ++i) out[i * stride] = detail::from_double<scalar_t>(s0 + static_cast<double>(i) * st);
            }
        };
        if (pool) pool->parallel_for(n, runtime::kParallelGrain, body);
        else body(0, n);
    });
    return Status();
}

}  // namespace ember::kernels
