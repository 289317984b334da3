#include "kernels/index/scatter.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/dispatch.h"

namespace ember::kernels {
namespace {

template <typename T>
constexpr bool kHalfType = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// The arithmetic type of a scatter reduction: float for Half and BFloat16, else the type's own.
template <typename T>
using Compute = std::conditional_t<kHalfType<T>, float, T>;

// dst op= value, with dst of the element type T or, for Half/BFloat16 accumulated in a float
// buffer, of float A.
template <ScatterReduce R, typename T, typename A = T>
inline void combine(A* dst, T value) {
    using C = Compute<T>;
    if constexpr (R == ScatterReduce::kAssign) {
        *dst = value;
    } else {
        const C a = detail::convert<C>(*dst), b = detail::convert<C>(value);
        if constexpr (R == ScatterReduce::kSum) {
            *dst = detail::convert<A>(a + b);  // integer promotion, then wrap back (or != 0 for bool)
        } else if constexpr (R == ScatterReduce::kProd) {
            *dst = detail::convert<A>(a * b);
        } else {
            // std::max/min(a, b) keep a NaN in a; a NaN in b is taken explicitly, as PyTorch does.
            C r = R == ScatterReduce::kAmax ? std::max(a, b) : std::min(a, b);
            if constexpr (std::is_floating_point_v<C>) {
                if (std::isnan(b)) r = b;
            }
            *dst = detail::convert<A>(r);
        }
    }
}

// Runs `fn(view)` on a float copy of a Half/BFloat16 `out` and rounds the results back once: the
// CPU accumulates these scatter reductions in float, not rounding after every update.
template <typename T, typename F>
void in_float_buffer(const TensorView& out, F&& fn) {
    const int64_t n = out.numel();
    std::vector<float> buf(static_cast<size_t>(std::max<int64_t>(n, 1)));
    TensorView acc = out;
    acc.dtype = DType::kFloat32;
    acc.data = buf.data();
    for (int d = out.ndim - 1, stride = 1; d >= 0; --d) {
        acc.strides[d] = stride;
        stride *= static_cast<int>(out.sizes[d]);
    }
    auto walk = [&](auto&& visit) {  // every element of out, in row-major order
        std::vector<int64_t> pos(static_cast<size_t>(out.ndim), 0);
        for (int64_t i = 0; i < n; ++i) {
            int64_t off = 0;
            for (int d = 0; d < out.ndim; ++d) off += pos[d] * out.strides[d];
            visit(static_cast<T*>(out.data) + off, buf[static_cast<size_t>(i)]);
            for (int d = out.ndim - 1; d >= 0 && ++pos[d] == out.sizes[d]; --d) pos[d] = 0;
        }
    };
    walk([](T* o, float& f) { f = detail::convert<float>(*o); });
    fn(acc);
    walk([](T* o, float& f) { *o = detail::convert<T>(f); });
}

// A 0-d view as a 1-d view of one element, so the loops below need no special case.
TensorView at_least_1d(const TensorView& v) {
    if (v.ndim > 0) return v;
    TensorView r = v;
    r.ndim = 1;
    r.sizes[0] = 1;
    r.strides[0] = 0;
    return r;
}

// Element offsets of the first position of line `t`: the lines enumerate index's positions with
// coordinate `dim` fixed at 0, in row-major order.
struct LineOffsets {
    int64_t index = 0, src = 0, out = 0;
};

LineOffsets line_offsets(const TensorView& index, const TensorView& src, const TensorView& out,
                         int dim, int64_t t) {
    LineOffsets r;
    for (int d = index.ndim - 1; d >= 0; --d) {
        if (d == dim) continue;
        const int64_t c = t % index.sizes[d];
        t /= index.sizes[d];
        r.index += c * index.strides[d];
        r.src += c * src.strides[d];
        r.out += c * out.strides[d];
    }
    return r;
}

template <ScatterReduce R, typename T, typename A = T>
void scatter_lines(const TensorView& out, const TensorView& index, const TensorView& src, int dim,
                   int64_t lines, runtime::ThreadPool* pool) {
    const int64_t len = index.sizes[dim];
    const auto* idx = static_cast<const int64_t*>(index.data);
    const auto* s = static_cast<const T*>(src.data);
    auto* o = static_cast<A*>(out.data);
    auto body = [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const LineOffsets base = line_offsets(index, src, out, dim, t);
            for (int64_t j = 0; j < len; ++j) {
                const int64_t target = idx[base.index + j * index.strides[dim]];
                combine<R, T, A>(o + base.out + target * out.strides[dim], s[base.src + j * src.strides[dim]]);
            }
        }
    };
    if (pool) pool->parallel_for(lines, std::max<int64_t>(1, runtime::kParallelGrain / 4 / std::max<int64_t>(1, len)), body);
    else body(0, lines);
}

template <typename T>
void scatter_typed(const TensorView& out, const TensorView& index, const TensorView& src, int dim,
                   ScatterReduce reduce, int64_t lines, runtime::ThreadPool* pool) {
    if constexpr (kHalfType<T>) {
        if (reduce != ScatterReduce::kAssign) {
            in_float_buffer<T>(out, [&](const TensorView& acc) {
                switch (reduce) {
                    case ScatterReduce::kSum: scatter_lines<ScatterReduce::kSum, T, float>(acc, index, src, dim, lines, pool); break;
                    case ScatterReduce::kProd: scatter_lines<ScatterReduce::kProd, T, float>(acc, index, src, dim, lines, pool); break;
                    case ScatterReduce::kAmax: scatter_lines<ScatterReduce::kAmax, T, float>(acc, index, src, dim, lines, pool); break;
                    case ScatterReduce::kAmin: scatter_lines<ScatterReduce::kAmin, T, float>(acc, index, src, dim, lines, pool); break;
                    case ScatterReduce::kAssign: break;
                }
            });
            return;
        }
    }
    switch (reduce) {
        case ScatterReduce::kAssign: scatter_lines<ScatterReduce::kAssign, T>(out, index, src, dim, lines, pool); break;
        case ScatterReduce::kSum: scatter_lines<ScatterReduce::kSum, T>(out, index, src, dim, lines, pool); break;
        case ScatterReduce::kProd: scatter_lines<ScatterReduce::kProd, T>(out, index, src, dim, lines, pool); break;
        case ScatterReduce::kAmax: scatter_lines<ScatterReduce::kAmax, T>(out, index, src, dim, lines, pool); break;
        case ScatterReduce::kAmin: scatter_lines<ScatterReduce::kAmin, T>(out, index, src, dim, lines, pool); break;
    }
}

char* at3(const TensorView& v, int64_t a, int64_t b, int64_t c) {
    return static_cast<char*>(v.data) +
           (a * v.strides[0] + b * v.strides[1] + c * v.strides[2]) * element_size(v.dtype);
}

template <ScatterReduce R, typename T, typename A = T>
void put_rows(const TensorView& out, const int64_t* rows, const TensorView& values, runtime::ThreadPool* pool) {
    const int64_t outer = out.sizes[0], inner = out.sizes[2], m = values.sizes[1];
    // Work item t is column (t / inner, t % inner); a chunk takes whole runs of k within each o, so
    // the innermost loop walks rows' contiguous elements while each column still sees every i in order.
    auto body = [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e;) {
            const int64_t o = t / inner, k0 = t % inner, k1 = std::min(inner, k0 + (e - t));
            for (int64_t i = 0; i < m; ++i) {
                A* dst = reinterpret_cast<A*>(at3(out, o, rows[i], 0));
                const T* val = reinterpret_cast<const T*>(at3(values, o, i, 0));
                for (int64_t k = k0; k < k1; ++k) combine<R, T, A>(dst + k * out.strides[2], val[k * values.strides[2]]);
            }
            t += k1 - k0;
        }
    };
    const int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, m));
    if (pool) pool->parallel_for(outer * inner, grain, body);
    else body(0, outer * inner);
}

}  // namespace

Status scatter(const TensorView& out_in, const TensorView& index_in, const TensorView& src_in, int dim,
               ScatterReduce reduce, runtime::ThreadPool* pool) {
    if (out_in.ndim != index_in.ndim || src_in.ndim != index_in.ndim || dim < 0 || dim >= std::max(1, index_in.ndim)) {
        return invalid_argument("scatter: out, index and src need the same rank and a valid dim");
    }
    if (index_in.dtype != DType::kInt64) return invalid_argument("scatter: index must be int64");
    if (out_in.dtype != src_in.dtype) return invalid_argument("scatter: out and src dtypes differ");
    if (is_complex(out_in.dtype)) return unimplemented("scatter: complex dtypes");
    const TensorView out = at_least_1d(out_in), index = at_least_1d(index_in), src = at_least_1d(src_in);
    for (int d = 0; d < index.ndim; ++d) {
        if ((d != dim && index.sizes[d] > out.sizes[d]) || index.sizes[d] > src.sizes[d]) {
            return invalid_argument("scatter: index is larger than out apart from dimension " + std::to_string(dim) +
                                    " or larger than src");
        }
    }
    if (index.numel() == 0) return Status();
    const int64_t len = index.sizes[dim], lines = index.numel() / len, limit = out.sizes[dim];
    const auto* idx = static_cast<const int64_t*>(index.data);
    for (int64_t t = 0; t < lines; ++t) {
        const int64_t base = line_offsets(index, src, out, dim, t).index;
        for (int64_t j = 0; j < len; ++j) {
            const int64_t v = idx[base + j * index.strides[dim]];
            if (v < 0 || v >= limit) {
                return invalid_argument("scatter: index " + std::to_string(v) + " is out of bounds for dimension " +
                                        std::to_string(dim) + " with size " + std::to_string(limit) +
                                        " (index out of bounds)");
            }
        }
    }
    EMBER_DISPATCH_REAL(out.dtype, scatter_typed<scalar_t>(out, index, src, dim, reduce, lines, pool));
    return Status();
}

Status index_put_rows(const TensorView& out, const TensorView& index, const TensorView& values,
                      bool accumulate, runtime::ThreadPool* pool, bool float_accumulate, const RowIndexRule& rule) {
    if (out.ndim != 3 || values.ndim != 3) return invalid_argument("index_put_rows: out and values must be viewed as 3-d");
    if (index.ndim != 1 || index.dtype != DType::kInt64) return invalid_argument("index_put_rows: index must be 1-d int64");
    if (out.dtype != values.dtype) return invalid_argument("index_put_rows: out and values dtypes differ");
    if (is_complex(out.dtype)) return unimplemented("index_put_rows: complex dtypes");
    const int64_t n = out.sizes[1], m = index.sizes[0];
    if (values.sizes[0] != out.sizes[0] || values.sizes[1] != m || values.sizes[2] != out.sizes[2]) {
        return invalid_argument("index_put_rows: values shape does not match out and index");
    }
    // Wrapped into a buffer first: every index is checked before the first write.
    std::vector<int64_t> rows(m);
    const auto* idx = static_cast<const int64_t*>(index.data);
    for (int64_t i = 0; i < m; ++i) {
        const int64_t v = idx[i * index.strides[0]];
        const int64_t r = v < 0 && rule.wrap_negative ? v + n : v;
        if (r < 0 || r >= n) {
            const std::string dim = rule.dim >= 0 ? "dimension " + std::to_string(rule.dim) : "dimension";
            return invalid_argument(std::string(rule.prefix) + "index " + std::to_string(v) + " is out of bounds for " +
                                    dim + " with size " + std::to_string(n));
        }
        rows[i] = r;
    }
    if (values.numel() == 0) return Status();
    EMBER_DISPATCH_REAL(out.dtype, {
        if constexpr (kHalfType<scalar_t>) {
            if (accumulate && float_accumulate) {
                in_float_buffer<scalar_t>(out, [&](const TensorView& acc) {
                    put_rows<ScatterReduce::kSum, scalar_t, float>(acc, rows.data(), values, pool);
                });
                return Status();
            }
        }
        if (accumulate) put_rows<ScatterReduce::kSum, scalar_t>(out, rows.data(), values, pool);
        else put_rows<ScatterReduce::kAssign, scalar_t>(out, rows.data(), values, pool);
    });
    return Status();
}

}  // namespace ember::kernels
