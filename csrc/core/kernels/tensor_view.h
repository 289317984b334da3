// TensorView: what a kernel sees of a tensor — a data pointer into device memory, an element
// type, sizes and strides in elements. It owns nothing; the caller keeps the memory alive
// until the kernel has run.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace ember::kernels {

constexpr int kMaxDims = 25;

struct TensorView {
    void* data = nullptr;
    DType dtype = DType::kFloat32;
    int ndim = 0;
    int64_t sizes[kMaxDims] = {};
    int64_t strides[kMaxDims] = {};

    int64_t numel() const {
        int64_t n = 1;
        for (int i = 0; i < ndim; ++i) n *= sizes[i];
        return n;
    }
    bool is_contiguous() const {
        int64_t expected = 1;
        for (int i = ndim - 1; i >= 0; --i) {
            if (sizes[i] != 1 && strides[i] != expected) return false;
            expected *= sizes[i];
        }
        return true;
    }
};

// A scalar as the host passed it; kernels convert it to the destination type once.
struct Scalar {
    enum class Kind : int8_t { kFloat, kInt, kBool } kind = Kind::kFloat;
    double f = 0;
    int64_t i = 0;
};

}  // namespace ember::kernels
