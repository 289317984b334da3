// Test helpers for kernels over strided views: a block of elements of any real dtype written and
// read as doubles, views into it with chosen sizes, strides and offset, and row-major position to
// element offset, so references can be computed in double on exactly the values the kernel saw.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/tensor_view.h"

namespace ember::kernels::strided_test {

struct Buffer {
    DType dtype;
    std::vector<unsigned char> bytes;

    Buffer(DType t, size_t n) : dtype(t), bytes(n * element_size(t), 0) {}
    Buffer(DType t, const std::vector<double>& values) : Buffer(t, values.size()) {
        for (size_t i = 0; i < values.size(); ++i) set(static_cast<int64_t>(i), values[i]);
    }
    // So that a braced list is always values, {4} included, never an element count.
    Buffer(DType t, std::initializer_list<double> values) : Buffer(t, std::vector<double>(values)) {}
    int64_t size() const { return static_cast<int64_t>(bytes.size()) / element_size(dtype); }
    double get(int64_t i) const {
        double v = 0;
        EMBER_DISPATCH_REAL(dtype, v = detail::as_double(reinterpret_cast<const scalar_t*>(bytes.data())[i]));
        return v;
    }
    void set(int64_t i, double v) {
        EMBER_DISPATCH_REAL(dtype, reinterpret_cast<scalar_t*>(bytes.data())[i] = detail::convert<scalar_t>(v));
    }
    // The element's bytes, for exact comparisons (NaN payloads and -0.0 included).
    std::vector<unsigned char> raw(int64_t i) const {
        const int64_t es = element_size(dtype);
        return {bytes.begin() + i * es, bytes.begin() + (i + 1) * es};
    }
    // Views of a const Buffer are for kernel inputs only.
    TensorView view(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, int64_t offset = 0) const {
        TensorView v;
        v.data = const_cast<unsigned char*>(bytes.data()) + offset * element_size(dtype);
        v.dtype = dtype;
        v.ndim = static_cast<int>(sizes.size());
        for (int i = 0; i < v.ndim; ++i) {
            v.sizes[i] = sizes[i];
            v.strides[i] = strides[i];
        }
        return v;
    }
    TensorView view(const std::vector<int64_t>& sizes) const { return view(sizes, contiguous_strides(sizes)); }

    static std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
        std::vector<int64_t> s(sizes.size());
        int64_t stride = 1;
        for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i) {
            s[i] = stride;
            stride *= sizes[i];
        }
        return s;
    }
};

// Element offset (from v.data, in elements) of row-major position p of v.
inline int64_t offset_of(const TensorView& v, int64_t p) {
    int64_t off = 0;
    for (int d = v.ndim - 1; d >= 0; --d) {
        off += (p % v.sizes[d]) * v.strides[d];
        p /= v.sizes[d];
    }
    return off;
}

// Offset (in elements) of v.data from the buffer's start.
inline int64_t base_of(const Buffer& b, const TensorView& v) {
    return (static_cast<const unsigned char*>(v.data) - b.bytes.data()) / element_size(b.dtype);
}

// Equal as numbers, NaN equal to NaN.
inline bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

inline constexpr DType kRealTypes[] = {DType::kBool,    DType::kUInt8,    DType::kInt8,    DType::kInt16,
                                       DType::kInt32,   DType::kInt64,    DType::kFloat16, DType::kBFloat16,
                                       DType::kFloat32, DType::kFloat64};

inline bool is_floating(DType t) {
    return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32 || t == DType::kFloat64;
}

}  // namespace ember::kernels::strided_test
