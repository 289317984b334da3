// The loop that copy and fill share: walks one or two strided tensors of the same shape in the
// first one's memory order, innermost dimension last, after merging dimensions that are
// contiguous in both. Internal to kernels/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels::detail {

// Shape and byte strides of up to two operands after merging dimensions.
struct Loop {
    int ndim = 0;
    int64_t sizes[kMaxDims] = {};
    int64_t strides[2][kMaxDims] = {};  // bytes

    int64_t numel() const {
        int64_t n = 1;
        for (int i = 0; i < ndim; ++i) n *= sizes[i];
        return n;
    }
};

inline Loop make_loop(const TensorView* const* ops, int nops) {
    Loop loop;
    const TensorView& first = *ops[0];
    // Walk the dims in the first operand's memory order (largest stride outermost, the second
    // operand's strides breaking ties), as TensorIterator does: copying a batch of column-major
    // matrices, or any layout both operands share, is then one contiguous run instead of a
    // stride-n walk. Copy and fill write each element once, so the order is free.
    int order[kMaxDims];
    int nd = 0;
    for (int d = 0; d < first.ndim; ++d) {
        if (first.sizes[d] != 1) order[nd++] = d;  // size-1 dims never move the pointer
    }
    // Operands that share memory (an overlapping self-copy, which the CPU allows when it cannot
    // prove the overlap partial) keep the logical order, whose element-by-element result is the CPU's.
    auto span = [](const TensorView& t) {
        const char* lo = static_cast<const char*>(t.data);
        int64_t extent = 0;
        for (int d = 0; d < t.ndim; ++d) extent += (t.sizes[d] - 1) * t.strides[d];
        return std::pair<const char*, const char*>(lo, lo + (extent + 1) * element_size(t.dtype));
    };
    bool shared = false;
    for (int k = 1; k < nops; ++k) {
        auto [a0, a1] = span(first);
        auto [b0, b1] = span(*ops[k]);
        shared = shared || (a0 < b1 && b0 < a1);
    }
    if (!shared) std::stable_sort(order, order + nd, [&](int a, int b) {
        for (int k = 0; k < nops; ++k) {
            if (ops[k]->strides[a] != ops[k]->strides[b]) return ops[k]->strides[a] > ops[k]->strides[b];
        }
        return false;
    });
    for (int i = 0; i < nd; ++i) {
        const int d = order[i];
        int64_t st[2];
        for (int k = 0; k < nops; ++k) st[k] = ops[k]->strides[d] * element_size(ops[k]->dtype);
        int n = loop.ndim;
        bool mergeable = n > 0;
        for (int k = 0; k < nops && mergeable; ++k) {
            mergeable = loop.strides[k][n - 1] == st[k] * first.sizes[d];
        }
        if (mergeable) {
            loop.sizes[n - 1] *= first.sizes[d];
            for (int k = 0; k < nops; ++k) loop.strides[k][n - 1] = st[k];
        } else {
            loop.sizes[n] = first.sizes[d];
            for (int k = 0; k < nops; ++k) loop.strides[k][n] = st[k];
            loop.ndim = n + 1;
        }
    }
    if (loop.ndim == 0) {  // a scalar or all-ones shape: one element
        loop.ndim = 1;
        loop.sizes[0] = first.numel() == 0 ? 0 : 1;
    }
    return loop;
}

// Calls inner(ptr0, ptr1, n, stride0, stride1) for each innermost row, rows split over the pool.
template <typename Inner>
void for_each_row(const Loop& loop, char* base0, char* base1, runtime::ThreadPool* pool,
                  Inner&& inner) {
    int64_t inner_n = loop.sizes[loop.ndim - 1];
    if (loop.ndim == 1) {
        // One long row (contiguous or evenly strided): split the row itself.
        auto chunk = [&](int64_t begin, int64_t end) {
            inner(base0 + begin * loop.strides[0][0], base1 + begin * loop.strides[1][0],
                  end - begin, loop.strides[0][0], loop.strides[1][0]);
        };
        if (pool != nullptr) {
            pool->parallel_for(inner_n, runtime::kParallelGrain, chunk);
        } else {
            chunk(0, inner_n);
        }
        return;
    }
    int64_t rows = inner_n == 0 ? 0 : loop.numel() / inner_n;
    int64_t grain = std::max<int64_t>(1, runtime::kParallelGrain / std::max<int64_t>(1, inner_n));
    auto body = [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            int64_t rem = r;
            char* p0 = base0;
            char* p1 = base1;
            for (int d = loop.ndim - 2; d >= 0; --d) {
                int64_t idx = rem % loop.sizes[d];
                rem /= loop.sizes[d];
                p0 += idx * loop.strides[0][d];
                p1 += idx * loop.strides[1][d];
            }
            inner(p0, p1, inner_n, loop.strides[0][loop.ndim - 1], loop.strides[1][loop.ndim - 1]);
        }
    };
    if (pool != nullptr) {
        pool->parallel_for(rows, grain, body);
    } else {
        body(0, rows);
    }
}

}  // namespace ember::kernels::detail
