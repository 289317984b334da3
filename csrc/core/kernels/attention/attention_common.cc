#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/attention/attention_internal.h"
#include "kernels/gemm/gemm.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise/simd.h"

namespace ember::kernels::detail::attention {
namespace {

#define EMBER_ATTN_INLINE inline __attribute__((always_inline))

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool is_input_dtype(DType t) { return t == DType::kFloat32 || t == DType::kBFloat16 || t == DType::kFloat16; }
bool is_floating(DType t) { return is_input_dtype(t) || t == DType::kFloat64; }

inline float to_f(float x) { return x; }
inline float to_f(double x) { return static_cast<float>(x); }
inline float to_f(BFloat16 x) { return to_float(x); }
inline float to_f(Half x) { return to_float(x); }
template <typename T>
inline float to_f(T x) {
    return static_cast<float>(x);
}

template <typename T>
inline T from_f(float x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else if constexpr (std::is_same_v<T, BFloat16>) return to_bfloat16(x);
    else if constexpr (std::is_same_v<T, Half>) return to_half(x);
    else return static_cast<T>(x);
}

template <typename T>
T* row_ptr(const TensorView& t, int64_t b, int64_t h, int64_t i) {
    return static_cast<T*>(t.data) + b * t.strides[0] + h * t.strides[1] + i * t.strides[2];
}

std::string shape_string(int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    std::string s = "[" + std::to_string(d0) + ", " + std::to_string(d1) + ", " + std::to_string(d2);
    if (d3 >= 0) s += ", " + std::to_string(d3);
    return s + "]";
}

// The mask for a block, transposed like the scores: bias[c * kBlockQ + r].
template <typename T>
void mask_bias(const Problem& p, int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
               float* bias) {
    const int64_t* ms = p.mask_strides;
    const T* base = reinterpret_cast<const T*>(p.mask) + b * ms[0] + h * ms[1] + i0 * ms[2] + j0 * ms[3];
    for (int64_t c = 0; c < nc; ++c) {
        const T* m = base + c * ms[3];
        float* dst = bias + c * kBlockQ;
        if constexpr (std::is_same_v<T, Bool>) {
            for (int64_t r = 0; r < nr; ++r) dst[r] = m[r * ms[2]] ? 0.f : kNegInf;
        } else {
            for (int64_t r = 0; r < nr; ++r) dst[r] = to_f(m[r * ms[2]]);
        }
    }
}

// Causality hides key j0 + c from the queries before it: columns r < c + j0 - i0 of row c.
EMBER_SIMD_CLONES void finish_scores(float* st, const float* bias, int64_t nc, int64_t nr, float scale,
                                     bool causal, int64_t key_offset) {
    for (int64_t c = 0; c < nc; ++c) {
        float* row = st + c * kBlockQ;
        if (bias != nullptr) {
            const float* br = bias + c * kBlockQ;
            for (int64_t r = 0; r < nr; ++r) row[r] = row[r] * scale + br[r];
        } else {
            for (int64_t r = 0; r < nr; ++r) row[r] *= scale;
        }
        if (causal)
            for (int64_t r = 0; r < std::min(nr, c + key_offset); ++r) row[r] = kNegInf;
    }
}

// An R x N block of c stays in registers while k streams through: R broadcasts of a and N / 16
// vector loads of b feed R * N / 16 multiply-adds. 4 x 64 is 16 AVX-512 registers.
template <bool TransA, int R, int N>
EMBER_ATTN_INLINE void gemm_tile(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                                 int64_t ldb, int64_t k, bool accumulate) {
    float acc[R][N];
    for (int r = 0; r < R; ++r)
        for (int x = 0; x < N; ++x) acc[r][x] = accumulate ? c[r * ldc + x] : 0.f;
    for (int64_t p = 0; p < k; ++p) {
        const float* br = b + p * ldb;
        for (int r = 0; r < R; ++r) {
            const float av = TransA ? a[p * lda + r] : a[r * lda + p];
            if constexpr (N <= 16) {
                // Left alone, GCC unrolls a 16-iteration loop into scalars before it vectorizes.
#pragma GCC unroll 1
                for (int x = 0; x < N; ++x) acc[r][x] += av * br[x];
            } else {
                for (int x = 0; x < N; ++x) acc[r][x] += av * br[x];
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int x = 0; x < N; ++x) c[r * ldc + x] = acc[r][x];
}

template <bool TransA, int R>
EMBER_ATTN_INLINE void gemm_rows(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                                 int64_t ldb, int64_t n, int64_t k, bool accumulate) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) gemm_tile<TransA, R, 64>(c + j, ldc, a, lda, b + j, ldb, k, accumulate);
    if (j + 32 <= n) {
        gemm_tile<TransA, R, 32>(c + j, ldc, a, lda, b + j, ldb, k, accumulate);
        j += 32;
    }
    if (j + 16 <= n) gemm_tile<TransA, R, 16>(c + j, ldc, a, lda, b + j, ldb, k, accumulate);
}

template <bool TransA>
EMBER_ATTN_INLINE void gemm_any(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                                int64_t ldb, int64_t m, int64_t n, int64_t k, bool accumulate) {
    // Row i of the left operand starts at a + i * step.
    const int64_t step = TransA ? 1 : lda;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) gemm_rows<TransA, 4>(c + i * ldc, ldc, a + i * step, lda, b, ldb, n, k, accumulate);
    for (; i < m; ++i) gemm_rows<TransA, 1>(c + i * ldc, ldc, a + i * step, lda, b, ldb, n, k, accumulate);
}

EMBER_SIMD_CLONES void gemm_f32(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                                int64_t ldb, int64_t m, int64_t n, int64_t k, bool accumulate) {
    gemm_any<false>(c, ldc, a, lda, b, ldb, m, n, k, accumulate);
}

EMBER_SIMD_CLONES void gemm_at_f32(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                                   int64_t ldb, int64_t m, int64_t n, int64_t k, bool accumulate) {
    gemm_any<true>(c, ldc, a, lda, b, ldb, m, n, k, accumulate);
}

// In 16 x 16 tiles, so that the 16 destination rows a tile writes stay in L1 while the source
// is read row by row; a plain loop strides through the whole destination for every source row.
EMBER_SIMD_CLONES void transpose_f32(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                                     int64_t cols) {
    constexpr int kTile = 16;
    for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
        for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
            if (r0 + kTile <= rows && c0 + kTile <= cols) {
                for (int c = 0; c < kTile; ++c)
                    for (int r = 0; r < kTile; ++r) dst[(c0 + c) * ldd + r0 + r] = src[(r0 + r) * lds + c0 + c];
                continue;
            }
            for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
                for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) dst[c * ldd + r] = src[r * lds + c];
        }
    }
    for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = rows; r < pad16(rows); ++r) dst[c * ldd + r] = 0.f;
}

}  // namespace

Status check_problem(const char* op, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& mask, bool causal, double scale, Problem* p) {
    const std::string o = std::string(op) + ": ";
    const TensorView* inputs[] = {&q, &k, &v};
    const char* names[] = {"query", "key", "value"};
    for (int i = 0; i < 3; ++i) {
        const TensorView& t = *inputs[i];
        if (t.ndim != 4) return invalid_argument(o + names[i] + " must be 4-d [B, H, L, D]");
        if (!is_input_dtype(t.dtype))
            return invalid_argument(o + names[i] + " must be float32, bfloat16 or float16, got " + dtype_name(t.dtype));
        if (t.dtype != q.dtype) return invalid_argument(o + "query, key and value must have the same dtype");
        if (t.data == nullptr && t.numel() > 0) return invalid_argument(o + names[i] + " has no data");
        if (t.sizes[3] > 1 && t.strides[3] != 1)
            return invalid_argument(o + names[i] + ": last dimension must have stride 1");
    }
    p->B = q.sizes[0], p->Hq = q.sizes[1], p->Lq = q.sizes[2], p->D = q.sizes[3];
    p->Hkv = k.sizes[1], p->Lk = k.sizes[2], p->Dv = v.sizes[3];
    if (k.sizes[0] != p->B || v.sizes[0] != p->B) return invalid_argument(o + "batch sizes differ");
    if (k.sizes[3] != p->D) return invalid_argument(o + "query and key head dims differ");
    if (v.sizes[1] != p->Hkv || v.sizes[2] != p->Lk)
        return invalid_argument(o + "key and value must agree on heads and length");
    if (p->Hkv == 0 ? p->Hq != 0 : p->Hq % p->Hkv != 0)
        return invalid_argument(o + "query heads (" + std::to_string(p->Hq) +
                                ") must be a multiple of key/value heads (" + std::to_string(p->Hkv) + ")");
    p->q = q, p->k = k, p->v = v;
    p->causal = causal;
    p->scale = static_cast<float>(scale);
    p->mask = nullptr;
    if (mask.data != nullptr) {
        if (mask.dtype != DType::kBool && !is_floating(mask.dtype))
            return invalid_argument(o + "mask must be bool or floating, got " + dtype_name(mask.dtype));
        if (mask.ndim > 4) return invalid_argument(o + "mask has more than 4 dimensions");
        const int64_t full[4] = {p->B, p->Hq, p->Lq, p->Lk};
        for (int d = 0; d < 4; ++d) {
            const int md = d - (4 - mask.ndim);
            if (md < 0) {
                p->mask_strides[d] = 0;
                continue;
            }
            if (mask.sizes[md] != full[d] && mask.sizes[md] != 1)
                return invalid_argument(o + "mask is not broadcastable to " +
                                        shape_string(full[0], full[1], full[2], full[3]));
            p->mask_strides[d] = mask.sizes[md] == 1 ? 0 : mask.strides[md];
        }
        p->mask = static_cast<const char*>(mask.data);
        p->mask_dtype = mask.dtype;
    }
    return Status();
}

Status check_tensor(const char* op, const char* name, const TensorView& t, int64_t d0, int64_t d1,
                    int64_t d2, int64_t d3) {
    const std::string what = std::string(op) + ": " + name;
    if (t.ndim != 4 || t.sizes[0] != d0 || t.sizes[1] != d1 || t.sizes[2] != d2 || t.sizes[3] != d3)
        return invalid_argument(what + " must be " + shape_string(d0, d1, d2, d3));
    if (!is_floating(t.dtype)) return invalid_argument(what + " must be floating point, got " + dtype_name(t.dtype));
    if (t.data == nullptr && t.numel() > 0) return invalid_argument(what + " has no data");
    if (d3 > 1 && t.strides[3] != 1) return invalid_argument(what + ": last dimension must have stride 1");
    return Status();
}

Status check_lse(const char* op, const TensorView& t, const Problem& p) {
    const std::string what = std::string(op) + ": lse";
    if (t.ndim != 3 || t.sizes[0] != p.B || t.sizes[1] != p.Hq || t.sizes[2] != p.Lq)
        return invalid_argument(what + " must be " + shape_string(p.B, p.Hq, p.Lq, -1));
    if (t.dtype != DType::kFloat32) return invalid_argument(what + " must be float32, got " + dtype_name(t.dtype));
    if (t.data == nullptr && t.numel() > 0) return invalid_argument(what + " has no data");
    return Status();
}

void load_rows(const TensorView& t, int64_t b, int64_t h, int64_t i0, int64_t n, int64_t cols, float* dst,
               int64_t ld) {
    const int64_t padded = pad16(cols);
    EMBER_DISPATCH_REAL(t.dtype, {
        for (int64_t r = 0; r < n; ++r) {
            const scalar_t* src = row_ptr<scalar_t>(t, b, h, i0 + r);
            float* d = dst + r * ld;
            for (int64_t c = 0; c < cols; ++c) d[c] = to_f(src[c]);
            for (int64_t c = cols; c < padded; ++c) d[c] = 0.f;
        }
    });
}

const float* float_rows(const TensorView& t, int64_t b, int64_t h, int64_t i0, int64_t n, int64_t cols,
                        bool padded, float* buf, int64_t* ld) {
    if (t.dtype == DType::kFloat32 && (!padded || cols % 16 == 0)) {
        *ld = t.strides[2];
        return row_ptr<const float>(t, b, h, i0);
    }
    *ld = pad16(cols);
    load_rows(t, b, h, i0, n, cols, buf, *ld);
    return buf;
}

void store_rows(const TensorView& t, int64_t b, int64_t h, int64_t i0, int64_t n, int64_t cols,
                const float* src, int64_t ld, const float* row_scale, float scale) {
    EMBER_DISPATCH_REAL(t.dtype, {
        for (int64_t r = 0; r < n; ++r) {
            scalar_t* d = row_ptr<scalar_t>(t, b, h, i0 + r);
            const float* s = src + r * ld;
            const float f = row_scale != nullptr ? row_scale[r] * scale : scale;
            for (int64_t c = 0; c < cols; ++c) d[c] = from_f<scalar_t>(s[c] * f);
        }
    });
}

float* lse_at(const TensorView& lse, int64_t b, int64_t h, int64_t i) {
    return static_cast<float*>(lse.data) + b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2];
}

void block_scores(const Problem& p, int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                  const float* k, int64_t ldk, const float* qt, float* st, float* bias) {
    gemm(st, kBlockQ, k, ldk, qt, kBlockQ, nc, pad16(nr), p.D, false);
    const float* bias_tile = nullptr;
    if (p.mask != nullptr) {
        EMBER_DISPATCH_REAL(p.mask_dtype, mask_bias<scalar_t>(p, b, h, i0, nr, j0, nc, bias));
        bias_tile = bias;
    }
    finish_scores(st, bias_tile, nc, nr, p.scale, p.causal, j0 - i0);
}

// The host's BLAS when it registered one (its micro-kernels suit every CPU: the tiles above are
// sized for AVX-512's 32 registers and spill on AVX2), else the tiles.
void gemm(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t m,
          int64_t n, int64_t k, bool accumulate) {
    if (BlockSgemm blas = block_sgemm()) return blas(false, false, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    gemm_f32(c, ldc, a, lda, b, ldb, m, n, k, accumulate);
}

void gemm_at(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t m,
             int64_t n, int64_t k, bool accumulate) {
    if (BlockSgemm blas = block_sgemm()) return blas(true, false, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    gemm_at_f32(c, ldc, a, lda, b, ldb, m, n, k, accumulate);
}

void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
    transpose_f32(dst, ldd, src, lds, rows, cols);
}

void parallel_tasks(runtime::ThreadPool* pool, int64_t n, int64_t cost,
                    const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    const int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, cost));
    if (pool == nullptr || n <= grain) {
        fn(0, n);
        return;
    }
    pool->parallel_for(n, grain, fn);
}

}  // namespace ember::kernels::detail::attention
