// Internal to kernels/attention: argument checks, the blocking that the forward and backward
// share, conversion between tensor rows and float blocks, and the compute loops
// (attention_common.cc).
//
// Every product runs on float blocks padded to a multiple of 16 columns with zeros, so the
// matrix loops work on whole vectors and never need a scalar tail.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

#include "base/status.h"
#include "kernels/attention/attention.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels::detail::attention {

// 64 x 64 float blocks (16 KiB each) keep a task's working set in L1/L2, and 64 queries per
// task amortize converting each key block across many rows.
constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 64;

inline int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

struct Problem {
    int64_t B = 0, Hq = 0, Hkv = 0, Lq = 0, Lk = 0, D = 0, Dv = 0;
    TensorView q, k, v;
    // The mask, with strides over [B, Hq, Lq, Lk] (0 on broadcast dims); data null when absent.
    const char* mask = nullptr;
    DType mask_dtype = DType::kBool;
    int64_t mask_strides[4] = {};
    bool causal = false;
    float scale = 1.f;

    int64_t group() const { return Hq / Hkv; }
    int64_t q_blocks() const { return (Lq + kBlockQ - 1) / kBlockQ; }
    // Keys past this index are invisible to every query in [i0, i0 + nr).
    int64_t key_end(int64_t i0, int64_t nr) const { return causal ? std::min(Lk, i0 + nr) : Lk; }
};

// Checks q, k, v and the mask and fills `p`.
Status check_problem(const char* op, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& mask, bool causal, double scale, Problem* p);

// A floating tensor of exactly these sizes whose last dimension has stride 1 (when it has more
// than one element). `lse` views go through check_lse instead: float32 and any strides.
Status check_tensor(const char* op, const char* name, const TensorView& t, int64_t d0, int64_t d1,
                    int64_t d2, int64_t d3);
Status check_lse(const char* op, const TensorView& t, const Problem& p);

// Rows [i0, i0 + n) of t[b, h] (cols elements each) as float rows of stride ld, zero-filled from
// cols up to pad16(cols).
void load_rows(const TensorView& t, int64_t b, int64_t h, int64_t i0, int64_t n, int64_t cols,
               float* dst, int64_t ld);
// The same rows as float without a copy when t holds float32 and the caller needs no zero
// padding (`padded` false, or cols already a multiple of 16); else load_rows into buf with
// ld = pad16(cols). *ld receives the row stride of the result.
const float* float_rows(const TensorView& t, int64_t b, int64_t h, int64_t i0, int64_t n, int64_t cols,
                        bool padded, float* buf, int64_t* ld);
// dst[c * ldd + r] = src[r * lds + c], zero-filled for r in [rows, pad16(rows)).
void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols);
// Writes src[r * ld + c] * row_scale[r] * scale (row_scale may be null) into rows of t[b, h].
void store_rows(const TensorView& t, int64_t b, int64_t h, int64_t i0, int64_t n, int64_t cols,
                const float* src, int64_t ld, const float* row_scale, float scale);

float* lse_at(const TensorView& lse, int64_t b, int64_t h, int64_t i);

// Scores are kept transposed, keys by queries: st[c * kBlockQ + r] for key j0 + c and query
// i0 + r. Then the product with keys needs the query block transposed once per task instead of
// every key block transposed, and the per-query softmax runs across a row of queries at once.
//
// st = scale * k . q^T + bias, -inf where the mask or causality hides the key. k holds nc key
// rows of stride ldk, qt the query block transposed ([D, kBlockQ], zero past nr). `bias` is
// scratch of kBlockK * kBlockQ floats. Columns nr .. pad16(nr) are left 0. Both passes call
// this so that the backward's probabilities match the forward's lse bit for bit.
void block_scores(const Problem& p, int64_t b, int64_t h, int64_t i0, int64_t nr, int64_t j0, int64_t nc,
                  const float* k, int64_t ldk, const float* qt, float* st, float* bias);

// c[m, n] (+)= a[m, k] . b[k, n], all row-major float with the given row strides; n must be a
// multiple of 16.
void gemm(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t m,
          int64_t n, int64_t k, bool accumulate);
// The same with a stored transposed: element (i, p) of the left operand is a[p * lda + i].
void gemm_at(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t m,
             int64_t n, int64_t k, bool accumulate);

// With a causal mask the last query blocks see the most keys. Visiting blocks as 0, n-1, 1,
// n-2, ... gives every contiguous range of tasks the pool hands out a similar amount of work.
inline int64_t balanced_block(int64_t t, int64_t n) { return t % 2 == 0 ? t / 2 : n - 1 - t / 2; }

// Runs fn(begin, end) over [0, n) tasks of about `cost` multiply-adds each, on the pool when the
// whole is worth splitting.
void parallel_tasks(runtime::ThreadPool* pool, int64_t n, int64_t cost,
                    const std::function<void(int64_t, int64_t)>& fn);

}  // namespace ember::kernels::detail::attention
