#include "kernels/reduce/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/elementwise/simd.h"

namespace ember::kernels {
namespace {

// Contiguous float sums: 32 float lanes over blocks of 2048 elements (each lane adds 64 values,
// then the lanes pairwise, like the CPU's cascade sum), the block totals in double. Twice the rate of double lanes, and
// no conversions; the error stays within a block's 64 float additions.
EMBER_SIMD_CLONES double contiguous_sum_f32(const float* p, int64_t n) {
    constexpr int64_t kLanes = 32, kBlockLen = 2048;
    double total = 0;
    int64_t i = 0;
    while (i + kLanes <= n) {
        float acc[kLanes] = {};
        const int64_t end = i + std::min(kBlockLen, (n - i) / kLanes * kLanes);
        for (; i < end; i += kLanes)
            for (int j = 0; j < kLanes; ++j) acc[j] += p[i + j];
        // Pairwise across the lanes (a serial sum of 32 would cost more than a short row itself):
        // four vectors into one, then a tree of depth 3.
        float v[8];
        for (int j = 0; j < 8; ++j) v[j] = (acc[j] + acc[j + 8]) + (acc[j + 16] + acc[j + 24]);
        total += static_cast<double>(((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7])));
    }
    for (; i < n; ++i) total += static_cast<double>(p[i]);
    return total;
}

EMBER_SIMD_CLONES double contiguous_sum_f64(const double* p, int64_t n) {
    double acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
    double s = 0;
    for (int j = 0; j < 8; ++j) s += acc[j];
    for (; i < n; ++i) s += p[i];
    return s;
}

// The second pass of a variance: the sums of d and d * d for d = x - shift, in double. With the
// shift near the mean, m2 = sum(d^2) - sum(d)^2 / n is exact to double rounding even when the
// shift is off by the rounding of a float32 first pass (whose error would otherwise add n times
// its square to m2). One function per type so that each gets the SIMD clones.
template <typename T>
inline void shifted_sums(const T* p, int64_t n, double shift, double* sum, double* sum_sq) {
    double acc[8] = {}, acc2[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) {
            const double d = static_cast<double>(p[i + j]) - shift;
            acc[j] += d;
            acc2[j] += d * d;
        }
    double s = 0, s2 = 0;
    for (int j = 0; j < 8; ++j) {
        s += acc[j];
        s2 += acc2[j];
    }
    for (; i < n; ++i) {
        const double d = static_cast<double>(p[i]) - shift;
        s += d;
        s2 += d * d;
    }
    *sum = s;
    *sum_sq = s2;
}
EMBER_SIMD_CLONES void contiguous_shifted_sums(const float* p, int64_t n, double shift, double* s, double* s2) {
    shifted_sums(p, n, shift, s, s2);
}
EMBER_SIMD_CLONES void contiguous_shifted_sums(const double* p, int64_t n, double shift, double* s, double* s2) {
    shifted_sums(p, n, shift, s, s2);
}

// Merges reduced dims that are contiguous with each other (and drops size-1 ones), so a
// reduction over a dense block walks one long stride-1 run.
TensorView coalesce_reduced(const TensorView& in, int kept) {
    TensorView v = in;
    v.ndim = kept;
    for (int d = kept; d < in.ndim; ++d) {
        if (in.sizes[d] == 1) continue;
        int last = v.ndim - 1;
        if (v.ndim > kept && v.strides[last] == in.strides[d] * in.sizes[d]) {
            v.sizes[last] *= in.sizes[d];
            v.strides[last] = in.strides[d];
        } else {
            v.sizes[v.ndim] = in.sizes[d];
            v.strides[v.ndim] = in.strides[d];
            ++v.ndim;
        }
    }
    return v;
}

// Walks elements [begin, end) of the reduced index space of one output, in memory order of
// the reduced dims (last dim fastest), calling f(value_as_double_or_int64, position).
template <typename T, typename F>
void walk(const char* base, const TensorView& in, int kept, int64_t begin, int64_t end, F&& f) {
    const int nr = in.ndim - kept;
    if (nr == 0) {
        if (begin < end) f(*reinterpret_cast<const T*>(base), 0);
        return;
    }
    int64_t idx[kMaxDims];
    int64_t rem = begin;
    for (int d = nr - 1; d >= 0; --d) {
        idx[d] = rem % in.sizes[kept + d];
        rem /= in.sizes[kept + d];
    }
    const int64_t esize = static_cast<int64_t>(sizeof(T));
    const char* p = base;
    for (int d = 0; d < nr; ++d) p += idx[d] * in.strides[kept + d] * esize;
    const int64_t inner = in.sizes[in.ndim - 1];
    const int64_t inner_stride = in.strides[in.ndim - 1] * esize;
    int64_t pos = begin;
    while (pos < end) {
        int64_t run = std::min(inner - idx[nr - 1], end - pos);
        for (int64_t i = 0; i < run; ++i) f(*reinterpret_cast<const T*>(p + i * inner_stride), pos + i);
        pos += run;
        p += run * inner_stride;
        idx[nr - 1] += run;
        // Carry into outer reduced dims.
        for (int d = nr - 1; d > 0 && idx[d] == in.sizes[kept + d]; --d) {
            p -= idx[d] * in.strides[kept + d] * esize;
            idx[d] = 0;
            idx[d - 1] += 1;
            p += in.strides[kept + d - 1] * esize;
        }
    }
}

template <typename T>
using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

// A partial result of one reduction over a range of positions.
struct Partial {
    double f = 0;       // sum / product / extreme / norm accumulator
    int64_t i = 0;      // integer sum / product
    int64_t index = -1; // position of the extreme
    int64_t count = 0;
    double mean = 0, m2 = 0;  // Welford
    bool nan = false;
    bool integral = false;    // extremes of integer inputs compare in `i`: exact beyond 2^53
};

template <typename T>
Partial reduce_range(ReduceOp op, const char* base, const ReduceArgs& a, int64_t begin, int64_t end) {
    Partial r;
    constexpr bool integral = std::is_integral_v<T>;
    switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kMean:
            if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
                if (a.in.ndim == a.kept + 1 && a.in.strides[a.in.ndim - 1] == 1) {
                    const T* p = reinterpret_cast<const T*>(base) + begin;
                    if constexpr (std::is_same_v<T, float>) r.f = contiguous_sum_f32(p, end - begin);
                    else r.f = contiguous_sum_f64(p, end - begin);
                    break;
                }
            }
            walk<T>(base, a.in, a.kept, begin, end, [&](T v, int64_t) {
                if constexpr (integral) r.i += static_cast<int64_t>(v);
                else r.f += detail::as_double(v);
            });
            break;
        case ReduceOp::kProd:
            r.f = 1;
            r.i = 1;
            walk<T>(base, a.in, a.kept, begin, end, [&](T v, int64_t) {
                if constexpr (integral) r.i = static_cast<int64_t>(static_cast<uint64_t>(r.i) * static_cast<uint64_t>(v));
                else r.f *= detail::as_double(v);
            });
            break;
        case ReduceOp::kAmax: case ReduceOp::kMax: case ReduceOp::kArgmax:
        case ReduceOp::kAmin: case ReduceOp::kMin: case ReduceOp::kArgmin: {
            const bool is_max = op == ReduceOp::kAmax || op == ReduceOp::kMax || op == ReduceOp::kArgmax;
            if constexpr (integral) {
                r.integral = true;
                walk<T>(base, a.in, a.kept, begin, end, [&](T v, int64_t pos) {
                    int64_t x = static_cast<int64_t>(v);
                    if (r.index < 0 || (is_max ? x > r.i : x < r.i)) {
                        r.i = x;
                        r.index = pos;
                    }
                });
                break;
            }
            walk<T>(base, a.in, a.kept, begin, end, [&](T v, int64_t pos) {
                double x = detail::as_double(v);
                if (r.nan) return;
                if (x != x) {
                    r.nan = true;
                    r.f = x;
                    r.index = pos;
                    return;
                }
                if (r.index < 0 || (is_max ? x > r.f : x < r.f)) {
                    r.f = x;
                    r.index = pos;
                }
            });
            break;
        }
        case ReduceOp::kNorm: {
            const double p = a.p;
            r.f = std::isinf(p) && p < 0 ? std::numeric_limits<double>::infinity() : 0.0;
            walk<T>(base, a.in, a.kept, begin, end, [&](T v, int64_t) {
                double x = std::fabs(detail::as_double(v));
                if (p == 2) r.f += x * x;
                else if (p == 1) r.f += x;
                else if (p == 0) r.f += x != 0;
                else if (std::isinf(p)) r.f = (x != x || r.f != r.f) ? x + r.f : (p > 0 ? std::max(r.f, x) : std::min(r.f, x));
                else r.f += std::pow(x, p);
            });
            break;
        }
        case ReduceOp::kAny:
            walk<T>(base, a.in, a.kept, begin, end, [&](T v, int64_t) { r.i |= detail::as_double(v) != 0; });
            break;
        case ReduceOp::kAll:
            r.i = 1;
            walk<T>(base, a.in, a.kept, begin, end, [&](T v, int64_t) { r.i &= detail::as_double(v) != 0; });
            break;
        case ReduceOp::kVar: case ReduceOp::kStd: {
            // Two passes over the range, a mean and then the deviations from it (shifted_sums),
            // in double: as accurate as a Welford update, without its division per element (a
            // latency chain ~20x slower than these sums). Ranges combine by Chan's formula.
            const int64_t n = end - begin;
            if (n <= 0) break;
            r.count = n;
            const double dn = static_cast<double>(n);
            double shift = 0, s = 0, s2 = 0;
            if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
                if (a.in.ndim == a.kept + 1 && a.in.strides[a.in.ndim - 1] == 1) {
                    const T* p = reinterpret_cast<const T*>(base) + begin;
                    if constexpr (std::is_same_v<T, float>) shift = contiguous_sum_f32(p, n) / dn;
                    else shift = contiguous_sum_f64(p, n) / dn;
                    contiguous_shifted_sums(p, n, shift, &s, &s2);
                    r.mean = shift + s / dn;
                    r.m2 = s2 - s * (s / dn);
                    if (r.m2 < 0) r.m2 = 0;  // rounding must not go below 0 (NaN stays NaN)
                    break;
                }
            }
            walk<T>(base, a.in, a.kept, begin, end, [&](T v, int64_t) { shift += detail::as_double(v); });
            shift /= dn;
            walk<T>(base, a.in, a.kept, begin, end, [&](T v, int64_t) {
                const double d = detail::as_double(v) - shift;
                s += d;
                s2 += d * d;
            });
            r.mean = shift + s / dn;
            r.m2 = s2 - s * (s / dn);
            if (r.m2 < 0) r.m2 = 0;
            break;
        }
    }
    r.count = op == ReduceOp::kVar || op == ReduceOp::kStd ? r.count : end - begin;
    return r;
}

// Combines b (a later range) into a.
void combine(ReduceOp op, Partial& a, const Partial& b, double p) {
    switch (op) {
        case ReduceOp::kSum: case ReduceOp::kMean: a.f += b.f; a.i += b.i; break;
        case ReduceOp::kProd:
            a.f *= b.f;
            a.i = static_cast<int64_t>(static_cast<uint64_t>(a.i) * static_cast<uint64_t>(b.i));
            break;
        case ReduceOp::kNorm:
            if (std::isinf(p)) a.f = (a.f != a.f || b.f != b.f) ? a.f + b.f : (p > 0 ? std::max(a.f, b.f) : std::min(a.f, b.f));
            else a.f += b.f;
            break;
        case ReduceOp::kAny: a.i |= b.i; break;
        case ReduceOp::kAll: a.i &= b.i; break;
        case ReduceOp::kVar: case ReduceOp::kStd: {  // Chan et al. parallel variance
            if (b.count == 0) break;
            if (a.count == 0) { a = b; break; }
            double n = static_cast<double>(a.count + b.count);
            double delta = b.mean - a.mean;
            a.m2 += b.m2 + delta * delta * static_cast<double>(a.count) * static_cast<double>(b.count) / n;
            a.mean += delta * static_cast<double>(b.count) / n;
            a.count += b.count;
            break;
        }
        default: {  // extremes: the earlier range wins ties; NaN wins everything
            const bool is_max = op == ReduceOp::kAmax || op == ReduceOp::kMax || op == ReduceOp::kArgmax;
            if (a.nan || b.index < 0) break;
            bool better = a.integral ? (is_max ? b.i > a.i : b.i < a.i) : (is_max ? b.f > a.f : b.f < a.f);
            if (a.index < 0 || b.nan || better) {
                a.f = b.f;
                a.i = b.i;
                a.index = b.index;
                a.nan = b.nan;
                a.integral = b.integral;
            }
        }
    }
    if (op != ReduceOp::kVar && op != ReduceOp::kStd) a.count += b.count;
}

template <typename O>
void store_value(char* p, O v, DType dt) {
    EMBER_DISPATCH_REAL(dt, { *reinterpret_cast<scalar_t*>(p) = detail::convert<scalar_t>(v); });
}

void finish(ReduceOp op, const Partial& r, const ReduceArgs& a, char* out, char* index_out, bool integral) {
    const DType dt = a.out.dtype;
    switch (op) {
        case ReduceOp::kSum: case ReduceOp::kProd:
            if (integral) store_value(out, r.i, dt);
            else store_value(out, r.f, dt);
            break;
        case ReduceOp::kMean:
            store_value(out, (integral ? static_cast<double>(r.i) : r.f) / static_cast<double>(r.count), dt);
            break;
        case ReduceOp::kAmax: case ReduceOp::kAmin:
            if (r.integral) store_value(out, r.i, dt);
            else store_value(out, r.f, dt);
            break;
        case ReduceOp::kMax: case ReduceOp::kMin:
            if (r.integral) store_value(out, r.i, dt);
            else store_value(out, r.f, dt);
            *reinterpret_cast<int64_t*>(index_out) = r.index;
            break;
        case ReduceOp::kArgmax: case ReduceOp::kArgmin: store_value(out, r.index, dt); break;
        case ReduceOp::kNorm: {
            double p = a.p, v = r.f;
            if (!(p == 0 || p == 1 || std::isinf(p))) v = p == 2 ? std::sqrt(v) : std::pow(v, 1.0 / p);
            store_value(out, v, dt);
            break;
        }
        case ReduceOp::kAny: case ReduceOp::kAll: store_value(out, r.i, dt); break;
        case ReduceOp::kVar: case ReduceOp::kStd: {
            double denom = std::max(0.0, static_cast<double>(r.count) - a.correction);
            double var = r.m2 / denom;  // 0/0 -> NaN as in PyTorch
            store_value(out, op == ReduceOp::kStd ? std::sqrt(var) : var, dt);
            break;
        }
    }
}

// Sums whose last kept dim runs along memory (stride 1) and whose reduced dims do not: bias
// gradients (kept [C] of [N, T, C]), means over a middle dim (kept [B, C] of [B, T, C]), and
// the backward of an expand (GQA's repeated key/value heads). For each index of the other kept
// dims, whole rows of the reduced positions are added into a vector of double accumulators,
// which vectorizes across the outputs instead of striding through memory once per output.
// Variances and standard deviations over the same dims take two such sweeps, the column means
// and then the squared deviations from them (as the per-row two-pass variance does).
template <typename T>
bool try_column_sum(ReduceOp op, const ReduceArgs& a, runtime::ThreadPool* pool) {
    const bool var = op == ReduceOp::kVar || op == ReduceOp::kStd;
    if (op != ReduceOp::kSum && op != ReduceOp::kMean && !(var && !std::is_integral_v<T>)) return false;
    if (a.kept < 1 || a.in.ndim <= a.kept) return false;
    const int ck = a.kept - 1;  // the kept dim along memory
    if (a.in.strides[ck] != 1 || a.in.sizes[ck] < 4) return false;
    const int64_t width = a.in.sizes[ck];
    int64_t outer = 1;
    for (int d = 0; d < ck; ++d) outer *= a.in.sizes[d];
    int64_t reduced = 1;
    for (int d = a.kept; d < a.in.ndim; ++d) reduced *= a.in.sizes[d];
    if (reduced == 0 || outer == 0) return false;
    const int64_t out_es = element_size(a.out.dtype);
    const int64_t cw = std::min<int64_t>(width, 1024);  // columns per work item
    const int64_t chunks = (width + cw - 1) / cw;
    const int nr = a.in.ndim - a.kept;
    auto body = [&](int64_t t0, int64_t t1) {
        std::vector<double> acc(static_cast<size_t>(cw));
        std::vector<int64_t> iacc(static_cast<size_t>(cw));
        std::vector<double> m2, dev;
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t o = t / chunks, c0 = (t % chunks) * cw, c1 = std::min(width, c0 + cw);
            const T* base = static_cast<const T*>(a.in.data) + c0;
            char* out = static_cast<char*>(a.out.data) + c0 * a.out.strides[ck] * out_es;
            for (int64_t d = ck - 1, rem = o; d >= 0; --d) {
                const int64_t i = rem % a.in.sizes[d];
                rem /= a.in.sizes[d];
                base += i * a.in.strides[d];
                out += i * a.out.strides[d] * out_es;
            }
            std::fill(acc.begin(), acc.end(), 0.0);
            std::fill(iacc.begin(), iacc.end(), 0);
            const int64_t n = c1 - c0;
            auto each_row = [&](auto&& f) {
                int64_t idx[kMaxDims] = {};
                for (int64_t r = 0; r < reduced; ++r) {
                    const T* row = base;
                    for (int d = 0; d < nr; ++d) row += idx[d] * a.in.strides[a.kept + d];
                    f(row);
                    for (int d = nr - 1; d >= 0; --d) {
                        if (++idx[d] < a.in.sizes[a.kept + d]) break;
                        idx[d] = 0;
                    }
                }
            };
            each_row([&](const T* row) {
                if constexpr (std::is_integral_v<T>) {
                    for (int64_t c = 0; c < n; ++c) iacc[c] += static_cast<int64_t>(row[c]);
                } else {
                    for (int64_t c = 0; c < n; ++c) acc[c] += detail::as_double(row[c]);
                }
            });
            if (var) {
                if (m2.empty()) m2.resize(static_cast<size_t>(cw));
                std::fill(m2.begin(), m2.end(), 0.0);
                if (dev.empty()) dev.resize(static_cast<size_t>(cw));
                std::fill(dev.begin(), dev.end(), 0.0);
                const double dn = static_cast<double>(reduced);
                for (int64_t c = 0; c < n; ++c) acc[c] /= dn;  // the means, the shifts of the second pass
                each_row([&](const T* row) {
                    for (int64_t c = 0; c < n; ++c) {
                        const double d = detail::as_double(row[c]) - acc[c];
                        dev[c] += d;
                        m2[c] += d * d;
                    }
                });
                const double denom = std::max(0.0, dn - a.correction);
                for (int64_t c = 0; c < n; ++c) {
                    const double v = (m2[c] - dev[c] * (dev[c] / dn)) / denom;  // 0/0 -> NaN as in PyTorch
                    store_value(out + c * a.out.strides[ck] * out_es, op == ReduceOp::kStd ? std::sqrt(v) : v,
                                a.out.dtype);
                }
                continue;
            }
            for (int64_t c = 0; c < n; ++c) {
                char* dst = out + c * a.out.strides[ck] * out_es;
                if (std::is_integral_v<T> && op == ReduceOp::kSum) {
                    store_value(dst, iacc[c], a.out.dtype);
                } else {
                    double v = std::is_integral_v<T> ? static_cast<double>(iacc[c]) : acc[c];
                    if (op == ReduceOp::kMean) v /= static_cast<double>(reduced);
                    store_value(dst, v, a.out.dtype);
                }
            }
        }
    };
    const int64_t items = outer * chunks;
    const int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, reduced * cw));
    if (pool) pool->parallel_for(items, grain, body);
    else body(0, items);
    return true;
}

// The stride between consecutive positions of dims [0, n) of `v` taken as one flat index, or -1
// when they are not evenly spaced (then positions need a division per dim).
int64_t flat_stride(const TensorView& v, int n) {
    int64_t stride = 1, expected = -1;
    for (int d = n - 1; d >= 0; --d) {
        if (v.sizes[d] == 1) continue;
        if (expected >= 0 && v.strides[d] != expected) return -1;
        if (expected < 0) stride = v.strides[d];
        expected = v.strides[d] * v.sizes[d];
    }
    return stride;
}

// Sums and means of contiguous rows (row norms, a loss's mean over classes, x.sum(-1)) whose rows
// and outputs are evenly spaced: each row is one vectorized run, found by one multiply. The
// general path finds every row by a division per dim, which costs more than adding a short row.
template <typename T>
bool try_row_sum(ReduceOp op, const ReduceArgs& a, runtime::ThreadPool* pool) {
    if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
        return false;
    } else {
        if (op != ReduceOp::kSum && op != ReduceOp::kMean) return false;
        if (a.in.ndim != a.kept + 1 || a.in.strides[a.kept] != 1) return false;
        const int64_t in_step = flat_stride(a.in, a.kept), out_step = flat_stride(a.out, a.kept);
        if (in_step < 0 || out_step < 0) return false;
        int64_t rows = 1;
        for (int d = 0; d < a.kept; ++d) rows *= a.in.sizes[d];
        const int64_t n = a.in.sizes[a.kept];
        // Few long rows split each row over the pool instead (the general path).
        if (pool && rows < pool->num_threads() && n >= 2 * runtime::kParallelGrain) return false;
        const int64_t out_es = element_size(a.out.dtype);
        const T* in = static_cast<const T*>(a.in.data);
        char* out = static_cast<char*>(a.out.data);
        auto body = [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r) {
                const T* row = in + r * in_step;
                double v = std::is_same_v<T, float> ? contiguous_sum_f32(reinterpret_cast<const float*>(row), n)
                                                    : contiguous_sum_f64(reinterpret_cast<const double*>(row), n);
                if (op == ReduceOp::kMean) v /= static_cast<double>(n);
                store_value(out + r * out_step * out_es, v, a.out.dtype);
            }
        };
        const int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, n));
        if (pool) pool->parallel_for(rows, grain, body);
        else body(0, rows);
        return true;
    }
}

template <typename T>
Status run(ReduceOp op, const ReduceArgs& a, runtime::ThreadPool* pool) {
    if (try_column_sum<T>(op, a, pool)) return Status();
    if (try_row_sum<T>(op, a, pool)) return Status();
    int64_t outer = 1;
    for (int d = 0; d < a.kept; ++d) outer *= a.in.sizes[d];
    int64_t reduced = 1;
    for (int d = a.kept; d < a.in.ndim; ++d) reduced *= a.in.sizes[d];
    const int64_t esize = static_cast<int64_t>(sizeof(T));
    const int64_t out_esize = element_size(a.out.dtype);
    auto one = [&](int64_t o, int64_t begin, int64_t end) -> std::pair<const char*, Partial> {
        const char* base = static_cast<const char*>(a.in.data);
        int64_t rem = o;
        for (int d = a.kept - 1; d >= 0; --d) {
            base += (rem % a.in.sizes[d]) * a.in.strides[d] * esize;
            rem /= a.in.sizes[d];
        }
        return {base, reduce_range<T>(op, base, a, begin, end)};
    };
    auto out_ptr = [&](const TensorView& v, int64_t o, int64_t es) {
        char* p = static_cast<char*>(v.data);
        int64_t rem = o;
        for (int d = a.kept - 1; d >= 0; --d) {
            p += (rem % v.sizes[d]) * v.strides[d] * es;
            rem /= v.sizes[d];
        }
        return p;
    };
    const bool integral = std::is_integral_v<T>;
    const int threads = pool ? pool->num_threads() : 1;
    if (outer >= threads || reduced < 2 * runtime::kParallelGrain) {
        int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, reduced));
        auto body = [&](int64_t b, int64_t e) {
            for (int64_t o = b; o < e; ++o) {
                Partial r = one(o, 0, reduced).second;
                finish(op, r, a, out_ptr(a.out, o, out_esize),
                       a.indices.data ? out_ptr(a.indices, o, 8) : nullptr, integral);
            }
        };
        if (pool) pool->parallel_for(outer, grain, body);
        else body(0, outer);
        return Status();
    }
    // Few outputs, many elements each: split every reduction across the pool.
    for (int64_t o = 0; o < outer; ++o) {
        int64_t chunks = threads;
        std::vector<Partial> parts(chunks);
        int64_t step = (reduced + chunks - 1) / chunks;
        pool->parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
            for (int64_t c = b; c < e; ++c) {
                int64_t lo = c * step, hi = std::min(reduced, lo + step);
                if (lo < hi) parts[c] = one(o, lo, hi).second;
            }
        });
        Partial r = parts[0];
        for (int64_t c = 1; c < chunks; ++c) {
            if (c * step < reduced) combine(op, r, parts[c], a.p);
        }
        finish(op, r, a, out_ptr(a.out, o, out_esize),
               a.indices.data ? out_ptr(a.indices, o, 8) : nullptr, integral);
    }
    return Status();
}

}  // namespace

const char* op_name(ReduceOp op) {
    static const char* names[] = {"sum", "mean", "prod", "amax", "amin", "max", "min", "argmax",
                                  "argmin", "norm", "any", "all", "var", "std"};
    return names[static_cast<int>(op)];
}

Status reduce(ReduceOp op, const ReduceArgs& a, runtime::ThreadPool* pool) {
    if (a.kept < 0 || a.kept > a.in.ndim || a.out.ndim != a.kept) {
        return invalid_argument("reduce: kept dims do not match the output");
    }
    if (is_complex(a.in.dtype) || is_complex(a.out.dtype)) return unimplemented("complex reductions");
    int64_t reduced = 1;
    for (int d = a.kept; d < a.in.ndim; ++d) reduced *= a.in.sizes[d];
    bool needs_elements = op == ReduceOp::kAmax || op == ReduceOp::kAmin || op == ReduceOp::kMax ||
                          op == ReduceOp::kMin || op == ReduceOp::kArgmax || op == ReduceOp::kArgmin;
    if (reduced == 0 && needs_elements) {
        return invalid_argument(std::string(op_name(op)) + " of an empty reduction");
    }
    if ((op == ReduceOp::kMax || op == ReduceOp::kMin) && a.indices.data == nullptr) {
        return invalid_argument("reduce: max/min need an indices output");
    }
    ReduceArgs c = a;
    c.in = coalesce_reduced(a.in, a.kept);
    EMBER_DISPATCH_REAL(c.in.dtype, return run<scalar_t>(op, c, pool));
    return unimplemented(std::string("reduce for dtype ") + dtype_name(a.in.dtype));
}

}  // namespace ember::kernels
