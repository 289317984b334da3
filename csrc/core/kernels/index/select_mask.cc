#include "kernels/index/select_mask.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/dispatch.h"

namespace ember::kernels {
namespace {

template <typename R>
struct Complex {
    R re, im;
};

template <typename T>
bool is_nonzero(T v) {
    return v != 0;  // NaN != 0 holds
}
template <>
bool is_nonzero(Half v) {
    return (v.bits & 0x7fff) != 0;  // every bit but the sign: -0.0 is zero
}
template <>
bool is_nonzero(BFloat16 v) {
    return (v.bits & 0x7fff) != 0;
}
template <>
bool is_nonzero(Complex<float> v) {
    return v.re != 0 || v.im != 0;
}
template <>
bool is_nonzero(Complex<double> v) {
    return v.re != 0 || v.im != 0;
}

// Calls f(T{}) with T the element type of t, complex types included.
template <typename F>
void dispatch_all(DType t, F&& f) {
    switch (t) {
        case DType::kComplex64: f(Complex<float>{}); break;
        case DType::kComplex128: f(Complex<double>{}); break;
        default: EMBER_DISPATCH_REAL(t, f(scalar_t{}));
    }
}

// A 0-d view as a 1-d view of one element, so the walk needs no special case.
TensorView at_least_1d(const TensorView& v) {
    if (v.ndim > 0) return v;
    TensorView r = v;
    r.ndim = 1;
    r.sizes[0] = 1;
    r.strides[0] = 0;
    return r;
}

// Walks positions [begin, end) of the row-major order of views[0]'s sizes (all views have them),
// calling run(coord, off, count) for each stretch along the last dim: `count` positions starting
// at coordinates `coord`, element j of view v at off[v] + j * views[v]->strides[last].
template <int N, typename Run>
void walk(const TensorView* const (&views)[N], int64_t begin, int64_t end, Run&& run) {
    const TensorView& shape = *views[0];
    const int last = shape.ndim - 1;
    int64_t coord[kMaxDims];
    int64_t off[N] = {};
    int64_t rem = begin;
    for (int d = last; d >= 0; --d) {
        coord[d] = rem % shape.sizes[d];
        rem /= shape.sizes[d];
        for (int v = 0; v < N; ++v) off[v] += coord[d] * views[v]->strides[d];
    }
    for (int64_t pos = begin; pos < end;) {
        const int64_t count = std::min(end - pos, shape.sizes[last] - coord[last]);
        run(static_cast<const int64_t*>(coord), static_cast<const int64_t*>(off), count);
        pos += count;
        coord[last] += count;
        for (int v = 0; v < N; ++v) off[v] += count * views[v]->strides[last];
        for (int d = last; d > 0 && coord[d] == shape.sizes[d]; --d) {
            coord[d] = 0;
            ++coord[d - 1];
            for (int v = 0; v < N; ++v) off[v] += views[v]->strides[d - 1] - shape.sizes[d] * views[v]->strides[d];
        }
    }
}

// Contiguous ranges of positions, one per participating thread; one range below the grain.
struct Ranges {
    int64_t count = 1, size = 0;
    int64_t begin(int64_t r) const { return r * size; }
    int64_t end(int64_t r, int64_t numel) const { return std::min(numel, (r + 1) * size); }
};

Ranges split(int64_t numel, runtime::ThreadPool* pool) {
    Ranges r;
    if (pool) r.count = std::clamp<int64_t>(numel / runtime::kParallelGrain, 1, pool->num_threads());
    r.size = (numel + r.count - 1) / r.count;
    return r;
}

template <typename F>
void for_ranges(const Ranges& ranges, runtime::ThreadPool* pool, F&& f) {
    if (ranges.count == 1 || !pool) {
        for (int64_t r = 0; r < ranges.count; ++r) f(r);
        return;
    }
    pool->parallel_for(ranges.count, 1, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) f(r);
    });
}

// Nonzero elements of v in each range.
std::vector<int64_t> count_ranges(const TensorView& v, const Ranges& ranges, runtime::ThreadPool* pool) {
    std::vector<int64_t> counts(ranges.count, 0);
    const int64_t numel = v.numel();
    const int64_t stride = v.strides[v.ndim - 1];
    dispatch_all(v.dtype, [&](auto tag) {
        using T = decltype(tag);
        const T* base = static_cast<const T*>(v.data);
        const TensorView* views[1] = {&v};
        for_ranges(ranges, pool, [&](int64_t r) {
            int64_t c = 0;
            walk(views, ranges.begin(r), ranges.end(r, numel), [&](const int64_t*, const int64_t* off, int64_t n) {
                const T* p = base + off[0];
                for (int64_t j = 0; j < n; ++j) c += is_nonzero(p[j * stride]);
            });
            counts[r] = c;
        });
    });
    return counts;
}

// Exclusive prefix sums of counts (each range's first output row), and the total.
int64_t to_offsets(std::vector<int64_t>& counts) {
    int64_t total = 0;
    for (auto& c : counts) {
        const int64_t n = c;
        c = total;
        total += n;
    }
    return total;
}

}  // namespace

StatusOr<int64_t> count_nonzero(const TensorView& in_view, runtime::ThreadPool* pool) {
    const TensorView in = at_least_1d(in_view);
    const int64_t numel = in.numel();
    if (numel == 0) return int64_t{0};
    std::vector<int64_t> counts = count_ranges(in, split(numel, pool), pool);
    return to_offsets(counts);
}

Status nonzero(const TensorView& out, const TensorView& in_view, runtime::ThreadPool* pool) {
    if (out.dtype != DType::kInt64 || out.ndim != 2 || out.sizes[1] != in_view.ndim) {
        return invalid_argument("nonzero: out must be int64 [count, " + std::to_string(in_view.ndim) + "]");
    }
    const TensorView in = at_least_1d(in_view);
    const int64_t numel = in.numel();
    const Ranges ranges = split(numel, pool);
    std::vector<int64_t> offsets = numel == 0 ? std::vector<int64_t>(1, 0) : count_ranges(in, ranges, pool);
    const int64_t total = to_offsets(offsets);
    if (total != out.sizes[0]) {
        return invalid_argument("nonzero: out has " + std::to_string(out.sizes[0]) + " rows for " +
                                std::to_string(total) + " nonzero elements");
    }
    const int cols = in_view.ndim, last = in.ndim - 1;
    if (total == 0 || cols == 0) return Status();
    const int64_t stride = in.strides[last];
    auto* o = static_cast<int64_t*>(out.data);
    dispatch_all(in.dtype, [&](auto tag) {
        using T = decltype(tag);
        const T* base = static_cast<const T*>(in.data);
        const TensorView* views[1] = {&in};
        for_ranges(ranges, pool, [&](int64_t r) {
            int64_t row = offsets[r];
            walk(views, ranges.begin(r), ranges.end(r, numel), [&](const int64_t* coord, const int64_t* off, int64_t n) {
                const T* p = base + off[0];
                for (int64_t j = 0; j < n; ++j) {
                    if (!is_nonzero(p[j * stride])) continue;
                    int64_t* dst = o + row * out.strides[0];
                    for (int d = 0; d < last; ++d) dst[d * out.strides[1]] = coord[d];
                    dst[last * out.strides[1]] = coord[last] + j;
                    ++row;
                }
            });
        });
    });
    return Status();
}

Status masked_select(const TensorView& out, const TensorView& in_view, const TensorView& mask_view,
                     runtime::ThreadPool* pool) {
    if (mask_view.dtype != DType::kBool) return invalid_argument("masked_select: mask must be bool");
    if (out.ndim != 1 || out.dtype != in_view.dtype) return invalid_argument("masked_select: out must be 1-d of the input's dtype");
    if (mask_view.ndim != in_view.ndim) return invalid_argument("masked_select: input and mask shapes differ");
    for (int d = 0; d < in_view.ndim; ++d) {
        if (mask_view.sizes[d] != in_view.sizes[d]) return invalid_argument("masked_select: input and mask shapes differ");
    }
    const TensorView in = at_least_1d(in_view), mask = at_least_1d(mask_view);
    const int64_t numel = in.numel();
    const Ranges ranges = split(numel, pool);
    std::vector<int64_t> offsets = numel == 0 ? std::vector<int64_t>(1, 0) : count_ranges(mask, ranges, pool);
    const int64_t total = to_offsets(offsets);
    if (total != out.sizes[0]) {
        return invalid_argument("masked_select: out has " + std::to_string(out.sizes[0]) + " elements for " +
                                std::to_string(total) + " selected");
    }
    if (total == 0) return Status();
    const int last = in.ndim - 1;
    const int64_t in_stride = in.strides[last], mask_stride = mask.strides[last], out_stride = out.strides[0];
    const auto* m = static_cast<const uint8_t*>(mask.data);
    dispatch_all(in.dtype, [&](auto tag) {
        using T = decltype(tag);
        const T* base = static_cast<const T*>(in.data);
        T* o = static_cast<T*>(out.data);
        const TensorView* views[2] = {&in, &mask};
        for_ranges(ranges, pool, [&](int64_t r) {
            int64_t pos = offsets[r];
            walk(views, ranges.begin(r), ranges.end(r, numel), [&](const int64_t*, const int64_t* off, int64_t n) {
                const T* p = base + off[0];
                const uint8_t* q = m + off[1];
                for (int64_t j = 0; j < n; ++j) {
                    if (q[j * mask_stride]) o[pos++ * out_stride] = p[j * in_stride];
                }
            });
        });
    });
    return Status();
}

}  // namespace ember::kernels
