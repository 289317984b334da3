// Shared plumbing of the row-wise norm kernels: argument checks, rows of a [rows, cols] view as
// contiguous buffers of the compute type C (float, or double for float64), single elements of
// 0-d/1-d views, and the split of rows over the pool. Internal to kernels/norm.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"
#include "kernels/dispatch.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

// The row loops are templates shared by float and double. Forcing them into each
// EMBER_SIMD_CLONES entry point lets every clone compile them for its own instruction set; an
// out-of-line copy would be built for the baseline only, and every clone would call it.
#define EMBER_NORM_INLINE inline __attribute__((always_inline))

namespace ember::kernels::detail::norm {

inline bool is_floating(DType t) {
    return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 ||
           t == DType::kFloat64;
}

template <typename C>
constexpr DType dtype_of() {
    return std::is_same_v<C, double> ? DType::kFloat64 : DType::kFloat32;
}

// Row r of a 2-d view, element r of a 1-d view, the element of a 0-d view.
inline char* at(const TensorView& v, int64_t r) {
    const int64_t stride = v.ndim > 0 ? v.strides[0] : 0;
    return static_cast<char*>(v.data) + r * stride * element_size(v.dtype);
}

template <typename C>
C load(const TensorView& v, int64_t r) {
    C out{};
    EMBER_DISPATCH_REAL(v.dtype, out = convert<C>(*reinterpret_cast<const scalar_t*>(at(v, r))));
    return out;
}

template <typename C>
void store(const TensorView& v, int64_t r, C value) {
    EMBER_DISPATCH_REAL(v.dtype, *reinterpret_cast<scalar_t*>(at(v, r)) = convert<scalar_t>(value));
}

// Element [r, c] of a 2-d view.
template <typename C>
C load_at(const TensorView& v, int64_t r, int64_t c) {
    C out{};
    EMBER_DISPATCH_REAL(v.dtype, out = convert<C>(reinterpret_cast<const scalar_t*>(at(v, r))[c * v.strides[1]]));
    return out;
}

template <typename C>
void store_at(const TensorView& v, int64_t r, int64_t c, C value) {
    EMBER_DISPATCH_REAL(v.dtype, reinterpret_cast<scalar_t*>(at(v, r))[c * v.strides[1]] = convert<scalar_t>(value));
}

// n contiguous elements of dtype `dt` at p: p itself when they already hold C (no copy), else
// `buf` filled by conversion.
template <typename C>
const C* load_span(const char* p, DType dt, int64_t n, C* buf) {
    if (dt == dtype_of<C>()) return reinterpret_cast<const C*>(p);
    EMBER_DISPATCH_REAL(dt, {
        const auto* s = reinterpret_cast<const scalar_t*>(p);
        for (int64_t i = 0; i < n; ++i) buf[i] = convert<C>(s[i]);
    });
    return buf;
}

// Where to compute n output elements at p: p itself when it holds C, else `buf`, which
// store_span then converts into p. Computing in place is safe for in == out because every
// kernel here writes element i only after its last read of input element i.
template <typename C>
C* dest_span(char* p, DType dt, C* buf) {
    return dt == dtype_of<C>() ? reinterpret_cast<C*>(p) : buf;
}

template <typename C>
void store_span(char* p, DType dt, int64_t n, const C* buf) {
    if (dt == dtype_of<C>()) return;
    EMBER_DISPATCH_REAL(dt, {
        auto* d = reinterpret_cast<scalar_t*>(p);
        for (int64_t i = 0; i < n; ++i) d[i] = convert<scalar_t>(buf[i]);
    });
}

// The same for row r of a [rows, cols] view.
template <typename C>
const C* load_row(const TensorView& v, int64_t r, int64_t n, C* buf) {
    return load_span(at(v, r), v.dtype, n, buf);
}

template <typename C>
C* dest_row(const TensorView& v, int64_t r, C* buf) {
    return dest_span(at(v, r), v.dtype, buf);
}

template <typename C>
void store_row(const TensorView& v, int64_t r, int64_t n, const C* buf) {
    store_span(at(v, r), v.dtype, n, buf);
}

// A [n] vector converted to C, or n copies of `absent` when the view has no data.
template <typename C>
std::vector<C> load_vector(const TensorView& v, int64_t n, C absent) {
    std::vector<C> out(static_cast<size_t>(n), absent);
    if (v.data != nullptr)
        for (int64_t i = 0; i < n; ++i) out[i] = load<C>(v, i);
    return out;
}

inline Status check_matrix(const char* op, const char* name, const TensorView& v, int64_t rows,
                           int64_t cols) {
    std::string what = std::string(op) + ": " + name;
    if (v.data == nullptr && rows * cols > 0) return invalid_argument(what + " has no data");
    if (!is_floating(v.dtype)) return invalid_argument(what + " must be floating point, got " + dtype_name(v.dtype));
    if (v.ndim != 2 || v.sizes[0] != rows || v.sizes[1] != cols)
        return invalid_argument(what + " must be [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
    if (cols > 1 && v.strides[1] != 1) return invalid_argument(what + ": last dimension must have stride 1");
    return Status();
}

// [n] with any stride; `floating` selects the dtype family it must belong to.
inline Status check_vector(const char* op, const char* name, const TensorView& v, int64_t n,
                           bool floating = true) {
    std::string what = std::string(op) + ": " + name;
    if (v.data == nullptr && n > 0) return invalid_argument(what + " has no data");
    bool integral = v.dtype == DType::kUInt8 || v.dtype == DType::kInt8 || v.dtype == DType::kInt16 ||
                    v.dtype == DType::kInt32 || v.dtype == DType::kInt64;
    if (floating ? !is_floating(v.dtype) : !integral)
        return invalid_argument(what + " has unsupported dtype " + dtype_name(v.dtype));
    if (v.ndim != 1 || v.sizes[0] != n) return invalid_argument(what + " must be [" + std::to_string(n) + "]");
    return Status();
}

// One element: 0-d, or any shape holding exactly one element.
inline Status check_scalar(const char* op, const char* name, const TensorView& v) {
    std::string what = std::string(op) + ": " + name;
    if (v.data == nullptr) return invalid_argument(what + " has no data");
    if (!is_floating(v.dtype)) return invalid_argument(what + " has unsupported dtype " + dtype_name(v.dtype));
    if (v.numel() != 1) return invalid_argument(what + " must hold one element");
    return Status();
}

// Runs fn(begin, end) over row ranges, keeping each task around 32K elements so short rows do
// not pay a pool round trip per row.
template <typename F>
void parallel_rows(runtime::ThreadPool* pool, int64_t rows, int64_t cols, const F& fn) {
    if (rows <= 0) return;
    const int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, cols));
    if (pool == nullptr || rows <= grain) {
        fn(0, rows);
        return;
    }
    pool->parallel_for(rows, grain, fn);
}

// Partial sums with independent accumulators: the loop pipelines instead of waiting on one
// running sum, and simple terms vectorize.
template <typename A, typename F>
EMBER_NORM_INLINE A lane_sum(int64_t n, const F& term) {
    constexpr int kLanes = 16;
    A acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int j = 0; j < kLanes; ++j) acc[j] += term(i + j);
    A s = 0;
    for (int j = 0; j < kLanes; ++j) s += acc[j];
    for (; i < n; ++i) s += term(i);
    return s;
}

}  // namespace ember::kernels::detail::norm
