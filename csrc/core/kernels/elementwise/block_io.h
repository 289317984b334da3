// Moving a block of elements between strided memory of any dtype and a contiguous buffer of
// the compute type. Internal to kernels/elementwise: the engine loads operands block by block,
// computes on contiguous buffers (which the compiler vectorizes), and stores the result.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/dispatch.h"
#include "kernels/elementwise/elementwise.h"

namespace ember::kernels::detail {

constexpr int64_t kBlock = 256;

template <typename C>
void load_block(C* buf, const char* p, int64_t stride, DType dt, int64_t n) {
    EMBER_DISPATCH_REAL(dt, {
        if constexpr (std::is_same_v<scalar_t, C>) {
            if (stride == static_cast<int64_t>(sizeof(C))) {
                std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(C));
                return;
            }
        }
        if (stride == 0) {
            C v = convert<C>(*reinterpret_cast<const scalar_t*>(p));
            for (int64_t i = 0; i < n; ++i) buf[i] = v;
            return;
        }
        for (int64_t i = 0; i < n; ++i) buf[i] = convert<C>(*reinterpret_cast<const scalar_t*>(p + i * stride));
    });
}

template <typename C>
void store_block(char* p, int64_t stride, DType dt, const C* buf, int64_t n) {
    EMBER_DISPATCH_REAL(dt, {
        if constexpr (std::is_same_v<scalar_t, C>) {
            if (stride == static_cast<int64_t>(sizeof(C))) {
                std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(C));
                return;
            }
        }
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<scalar_t*>(p + i * stride) = convert<scalar_t>(buf[i]);
    });
}

// Every operand holds a real dtype: load_block and store_block move nothing for others (a
// complex out= of a real computation would keep its old contents), so the kernels refuse them.
inline bool real_operands(const ElementwiseLoop& loop) {
    for (int k = 0; k < loop.nops; ++k)
        if (is_complex(loop.dtype[k])) return false;
    return true;
}

template <typename C>
constexpr DType dtype_of() {
    if constexpr (std::is_same_v<C, float>) return DType::kFloat32;
    else if constexpr (std::is_same_v<C, double>) return DType::kFloat64;
    else return DType::kInt64;
}

// A block of an input operand as the compute loop reads it: the tensor memory itself when it
// already holds C contiguously (no copy), else `buf`, filled by load_block (conversion, strides,
// a broadcast value).
template <typename C>
const C* input_block(C* buf, const char* p, int64_t stride, DType dt, int64_t n) {
    if (dt == dtype_of<C>() && stride == static_cast<int64_t>(sizeof(C))) return reinterpret_cast<const C*>(p);
    load_block(buf, p, stride, dt, n);
    return buf;
}

// One input operand along a row, block by block. A broadcast input (stride 0: a Python number, a
// per-row scale) is converted into its buffer once, at the first block, and reused by the rest.
template <typename C>
class RowInput {
  public:
    RowInput(C* buf, const char* p, int64_t stride, DType dt) : buf_(buf), p_(p), stride_(stride), dt_(dt) {}
    const C* block(int64_t j, int64_t m) {
        if (stride_ != 0) return input_block(buf_, p_ + j * stride_, stride_, dt_, m);
        if (!filled_) load_block(buf_, p_, 0, dt_, kBlock);
        filled_ = true;
        return buf_;
    }

  private:
    C* buf_;
    const char* p_;
    int64_t stride_;
    DType dt_;
    bool filled_ = false;
};

// Where the compute loop writes a block of the output: the tensor memory when it holds C
// contiguously, else `buf`, which flush_block then stores.
template <typename C>
C* output_block(C* buf, char* p, int64_t stride, DType dt) {
    if (dt == dtype_of<C>() && stride == static_cast<int64_t>(sizeof(C))) return reinterpret_cast<C*>(p);
    return buf;
}
template <typename C>
void flush_block(const C* written, const C* buf, char* p, int64_t stride, DType dt, int64_t n) {
    if (written == buf) store_block(p, stride, dt, buf, n);
}

// Whether a row can be computed in place of the blocks: every operand already holds the compute
// type, contiguously. Then the compute loop reads and writes tensor memory directly.
template <typename C>
bool direct_row(const ElementwiseLoop& loop, const int64_t* strides) {
    for (int k = 0; k < loop.nops; ++k) {
        if (loop.dtype[k] != dtype_of<C>() || strides[k] != static_cast<int64_t>(sizeof(C))) return false;
    }
    return true;
}

// Calls row(ptrs, strides_of_last_dim, n) for every stretch of the last dimension, splitting
// the work over the pool. `weight`: elements each index of the loop stands for (a caller that
// walks a short dim inside each element passes its size), so the split sees the real work.
template <typename Row>
void for_each_row(const ElementwiseLoop& loop, runtime::ThreadPool* pool, Row&& row, int64_t weight = 1) {
    const int nd = loop.ndim;
    const int64_t inner = nd == 0 ? 1 : loop.shape[nd - 1];
    int64_t rows = 1;
    for (int d = 0; d + 1 < nd; ++d) rows *= loop.shape[d];
    if (inner == 0 || rows == 0) return;
    int64_t last_stride[kMaxOperands] = {};
    for (int k = 0; k < loop.nops; ++k) last_stride[k] = nd == 0 ? 0 : loop.strides[k][nd - 1];
    // Rows [begin, end): the first row's position is found by division, the rest by stepping an
    // odometer over the outer dims (short rows would otherwise pay a division per dim each).
    auto run_rows = [&](int64_t begin, int64_t end, int64_t col0, int64_t col1) {
        if (begin >= end) return;
        int64_t idx[kMaxLoopDims] = {};
        char* ptrs[kMaxOperands];
        for (int k = 0; k < loop.nops; ++k) ptrs[k] = loop.data[k] + col0 * last_stride[k];
        int64_t rem = begin;
        for (int d = nd - 2; d >= 0; --d) {
            idx[d] = rem % loop.shape[d];
            rem /= loop.shape[d];
            for (int k = 0; k < loop.nops; ++k) ptrs[k] += idx[d] * loop.strides[k][d];
        }
        for (int64_t r = begin;;) {
            row(ptrs, last_stride, col1 - col0);
            if (++r == end) break;
            for (int d = nd - 2; d >= 0; --d) {
                if (++idx[d] < loop.shape[d]) {
                    for (int k = 0; k < loop.nops; ++k) ptrs[k] += loop.strides[k][d];
                    break;
                }
                idx[d] = 0;
                for (int k = 0; k < loop.nops; ++k) ptrs[k] -= (loop.shape[d] - 1) * loop.strides[k][d];
            }
        }
    };
    const int64_t total = rows * inner * weight;
    const int64_t grain_items = std::max<int64_t>(1, runtime::kParallelGrain / weight);
    if (pool == nullptr || total < 2 * runtime::kParallelGrain) {
        run_rows(0, rows, 0, inner);
    } else if (rows >= pool->num_threads() * 4) {
        int64_t grain = std::max<int64_t>(1, grain_items / inner);
        pool->parallel_for(rows, grain, [&](int64_t b, int64_t e) { run_rows(b, e, 0, inner); });
    } else {
        // Few long rows: split each row's columns instead.
        for (int64_t r = 0; r < rows; ++r) {
            pool->parallel_for(inner, grain_items, [&](int64_t b, int64_t e) { run_rows(r, r + 1, b, e); });
        }
    }
}

}  // namespace ember::kernels::detail
