#include "kernels/index/index.h"

#include <cstring>
#include <string>
#include <vector>

#include "kernels/dispatch.h"

namespace ember::kernels {
namespace {

char* at3(const TensorView& v, int64_t a, int64_t b, int64_t c) {
    int64_t es = element_size(v.dtype);
    return static_cast<char*>(v.data) + (a * v.strides[0] + b * v.strides[1] + c * v.strides[2]) * es;
}

Status check3(const TensorView& v, const char* what) {
    if (v.ndim != 3) return invalid_argument(std::string(what) + " must be viewed as 3-d");
    return Status();
}

}  // namespace

Status index_select(const TensorView& out, const TensorView& in, const TensorView& index,
                    runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check3(out, "index_select out"));
    EMBER_RETURN_IF_ERROR(check3(in, "index_select input"));
    if (index.dtype != DType::kInt64 || index.ndim != 1) return invalid_argument("index must be 1-d int64");
    if (in.dtype != out.dtype) return invalid_argument("index_select: dtype mismatch");
    const int64_t n = index.sizes[0], in_n = in.sizes[1];
    const auto* idx = static_cast<const int64_t*>(index.data);
    for (int64_t i = 0; i < n; ++i) {
        int64_t j = idx[i * index.strides[0]];
        if (j < 0 || j >= in_n) {
            return invalid_argument("index " + std::to_string(j) + " is out of range for dimension of size " +
                                    std::to_string(in_n) + " (index out of range in self)");
        }
    }
    const int64_t outer = out.sizes[0], inner = out.sizes[2], es = element_size(out.dtype);
    const bool rows_contiguous = in.strides[2] == 1 && out.strides[2] == 1;
    auto body = [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            int64_t o = t / n, i = t % n;
            int64_t j = idx[i * index.strides[0]];
            if (rows_contiguous) {
                std::memcpy(at3(out, o, i, 0), at3(in, o, j, 0), static_cast<size_t>(inner * es));
            } else {
                for (int64_t k = 0; k < inner; ++k) std::memcpy(at3(out, o, i, k), at3(in, o, j, k), es);
            }
        }
    };
    if (pool) pool->parallel_for(outer * n, std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, inner)), body);
    else body(0, outer * n);
    return Status();
}

Status gather(const TensorView& out, const TensorView& in, const TensorView& index, int dim,
              runtime::ThreadPool* pool) {
    if (out.ndim != index.ndim || in.ndim != index.ndim || dim < 0 || dim >= std::max(1, in.ndim)) {
        return invalid_argument("gather: out, input and index need the same rank");
    }
    if (index.dtype != DType::kInt64 || in.dtype != out.dtype) return invalid_argument("gather: dtypes");
    const int nd = index.ndim;
    const int64_t n = index.numel(), es = element_size(in.dtype);
    const int64_t limit = nd == 0 ? 1 : in.sizes[dim];
    // Checked first, so a bad index leaves out untouched (the error surfaces at the next sync).
    auto offset = [&](const TensorView& v, int64_t linear, int skip, int64_t replace) {
        int64_t off = 0;
        for (int d = nd - 1; d >= 0; --d) {
            int64_t c = linear % index.sizes[d];
            linear /= index.sizes[d];
            off += (d == skip ? replace : c) * v.strides[d];
        }
        return off;
    };
    const auto* idx = static_cast<const int64_t*>(index.data);
    for (int64_t p = 0; p < n; ++p) {
        int64_t j = idx[offset(index, p, -1, 0)];
        if (j < 0 || j >= limit) {
            return invalid_argument("gather: index " + std::to_string(j) + " is out of bounds for dimension " +
                                    std::to_string(dim) + " with size " + std::to_string(limit));
        }
    }
    auto body = [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
            int64_t j = idx[offset(index, p, -1, 0)];
            std::memcpy(static_cast<char*>(out.data) + offset(out, p, -1, 0) * es,
                        static_cast<const char*>(in.data) + offset(in, p, nd == 0 ? -1 : dim, j) * es, es);
        }
    };
    if (pool) pool->parallel_for(n, runtime::kParallelGrain / 4, body);
    else body(0, n);
    return Status();
}

Status index_add_rows(const TensorView& out, const TensorView& src, const TensorView& index,
                      int64_t skip, runtime::ThreadPool* pool) {
    if (out.ndim != 2 || src.ndim != 2 || index.ndim != 1 || index.dtype != DType::kInt64) {
        return invalid_argument("index_add_rows: expected 2-d out/src and 1-d int64 index");
    }
    if (out.dtype != src.dtype || out.sizes[1] != src.sizes[1] || src.sizes[0] != index.sizes[0]) {
        return invalid_argument("index_add_rows: shape or dtype mismatch");
    }
    const int64_t n = index.sizes[0], rows = out.sizes[0], inner = out.sizes[1];
    const auto* idx = static_cast<const int64_t*>(index.data);
    for (int64_t i = 0; i < n; ++i) {
        int64_t j = idx[i * index.strides[0]];
        if (j < 0 || j >= rows) return invalid_argument("index out of range in self");
    }
    EMBER_DISPATCH_REAL(out.dtype, {
        auto body = [&](int64_t k0, int64_t k1) {
            // Accumulate in float for low precision types: one buffer row per output row touched.
            for (int64_t i = 0; i < n; ++i) {
                int64_t j = idx[i * index.strides[0]];
                if (j == skip) continue;
                auto* o = static_cast<scalar_t*>(out.data) + j * out.strides[0];
                const auto* s = static_cast<const scalar_t*>(src.data) + i * src.strides[0];
                for (int64_t k = k0; k < k1; ++k) {
                    double sum = detail::as_double(o[k * out.strides[1]]) + detail::as_double(s[k * src.strides[1]]);
                    o[k * out.strides[1]] = detail::from_double<scalar_t>(sum);
                }
            }
        };
        if (pool) pool->parallel_for(inner, std::max<int64_t>(64, runtime::kParallelGrain / std::max<int64_t>(1, n)), body);
        else body(0, inner);
    });
    return Status();
}

Status triangle(const TensorView& out, const TensorView& in, int64_t diagonal, bool lower,
                runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check3(out, "triangle out"));
    EMBER_RETURN_IF_ERROR(check3(in, "triangle input"));
    if (in.dtype != out.dtype) return invalid_argument("triangle: dtype mismatch");
    const int64_t batch = out.sizes[0], rows = out.sizes[1], cols = out.sizes[2];
    const int64_t es = element_size(out.dtype);
    auto body = [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            int64_t bi = t / rows, r = t % rows;
            for (int64_t c = 0; c < cols; ++c) {
                bool keep = lower ? c - r <= diagonal : c - r >= diagonal;
                char* dst = at3(out, bi, r, c);
                if (keep) std::memmove(dst, at3(in, bi, r, c), es);
                else std::memset(dst, 0, es);
            }
        }
    };
    if (pool) pool->parallel_for(batch * rows, std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, cols)), body);
    else body(0, batch * rows);
    return Status();
}

}  // namespace ember::kernels
