#include "kernels/index/index.h"

#include <array>
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

namespace {

// Visits positions [b, e) of a row-major walk over `sizes` (nd >= 1), calling f(off) with each
// view's element offset. Coordinates advance by increments, with a carry once per row, rather
// than dividing every position back into coordinates.
template <int K, typename F>
void walk(int nd, const int64_t* sizes, const std::array<const int64_t*, K>& strides, int64_t b, int64_t e, F&& f) {
    int64_t coord[kMaxDims] = {};
    std::array<int64_t, K> off{};
    for (int64_t rest = b, d = nd - 1; d >= 0; --d) {
        coord[d] = rest % sizes[d];
        rest /= sizes[d];
        for (int k = 0; k < K; ++k) off[k] += coord[d] * strides[k][d];
    }
    const int last = nd - 1;
    for (int64_t p = b; p < e; ++p) {
        f(off);
        for (int k = 0; k < K; ++k) off[k] += strides[k][last];
        if (++coord[last] < sizes[last]) continue;
        for (int d = last; d > 0 && coord[d] == sizes[d]; --d) {  // carry
            for (int k = 0; k < K; ++k) off[k] += strides[k][d - 1] - coord[d] * strides[k][d];
            coord[d] = 0;
            ++coord[d - 1];
        }
    }
}

struct Bytes16 {
    uint64_t lo, hi;
};

template <typename T>
void gather_elements(const TensorView& out, const TensorView& in, const TensorView& index, int dim,
                     const int64_t* in_strides, int64_t b, int64_t e) {
    auto* o = static_cast<T*>(out.data);
    const auto* x = static_cast<const T*>(in.data);
    const auto* idx = static_cast<const int64_t*>(index.data);
    const int64_t along = in.strides[dim];
    walk<3>(index.ndim, index.sizes, {out.strides, index.strides, in_strides}, b, e,
            [&](const std::array<int64_t, 3>& off) { o[off[0]] = x[off[2] + idx[off[1]] * along]; });
}

}  // namespace

Status gather(const TensorView& out, const TensorView& in, const TensorView& index, int dim,
              runtime::ThreadPool* pool) {
    if (out.ndim != index.ndim || in.ndim != index.ndim || dim < 0 || dim >= std::max(1, in.ndim)) {
        return invalid_argument("gather: out, input and index need the same rank");
    }
    if (index.dtype != DType::kInt64 || in.dtype != out.dtype) return invalid_argument("gather: dtypes");
    const int64_t n = index.numel(), es = element_size(in.dtype);
    if (n == 0) return Status();
    // A 0-d gather is a 1-d one of one element.
    TensorView o = out, x = in, ix = index;
    for (TensorView* v : {&o, &x, &ix}) {
        if (v->ndim == 0) {
            v->ndim = 1;
            v->sizes[0] = 1;
            v->strides[0] = 0;
        }
    }
    const int64_t limit = x.sizes[dim];
    // Checked first, so a bad index leaves out untouched (the error surfaces at the next sync).
    const auto* idx = static_cast<const int64_t*>(ix.data);
    int64_t bad = -1;
    bool found = false;
    walk<1>(ix.ndim, ix.sizes, {ix.strides}, 0, n, [&](const std::array<int64_t, 1>& off) {
        const int64_t j = idx[off[0]];
        if (!found && (j < 0 || j >= limit)) {
            found = true;
            bad = j;
        }
    });
    if (found) {
        return invalid_argument("gather: index " + std::to_string(bad) + " is out of bounds for dimension " +
                                std::to_string(dim) + " with size " + std::to_string(limit));
    }
    // The input is walked over the index's shape with its own strides, except along `dim`,
    // where the index value places the read.
    int64_t in_strides[kMaxDims];
    for (int d = 0; d < x.ndim; ++d) in_strides[d] = d == dim ? 0 : x.strides[d];
    auto body = [&](int64_t b, int64_t e) {
        switch (es) {
            case 1: return gather_elements<uint8_t>(o, x, ix, dim, in_strides, b, e);
            case 2: return gather_elements<uint16_t>(o, x, ix, dim, in_strides, b, e);
            case 4: return gather_elements<uint32_t>(o, x, ix, dim, in_strides, b, e);
            case 8: return gather_elements<uint64_t>(o, x, ix, dim, in_strides, b, e);
            default: return gather_elements<Bytes16>(o, x, ix, dim, in_strides, b, e);
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
