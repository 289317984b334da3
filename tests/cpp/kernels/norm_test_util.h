// Test helpers for the norm kernels: contiguous tensors of any real dtype built from and read
// back as doubles, so references can be computed in double on exactly the values the kernel saw.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/tensor_view.h"

namespace ember::kernels::norm_test {

struct Tensor {
    DType dtype;
    std::vector<int64_t> sizes;
    std::vector<unsigned char> bytes;

    Tensor(DType t, std::vector<int64_t> s, const std::vector<double>& values) : dtype(t), sizes(std::move(s)) {
        bytes.resize(values.size() * element_size(t));
        for (size_t i = 0; i < values.size(); ++i)
            EMBER_DISPATCH_REAL(t, reinterpret_cast<scalar_t*>(bytes.data())[i] = detail::convert<scalar_t>(values[i]));
    }
    TensorView view() {
        TensorView v;
        v.data = bytes.data();
        v.dtype = dtype;
        v.ndim = static_cast<int>(sizes.size());
        int64_t stride = 1;
        for (int i = v.ndim - 1; i >= 0; --i) {
            v.sizes[i] = sizes[i];
            v.strides[i] = stride;
            stride *= sizes[i];
        }
        return v;
    }
    std::vector<double> values() const {
        std::vector<double> out(bytes.size() / element_size(dtype));
        for (size_t i = 0; i < out.size(); ++i)
            EMBER_DISPATCH_REAL(dtype, out[i] = detail::as_double(reinterpret_cast<const scalar_t*>(bytes.data())[i]));
        return out;
    }
    double item() const { return values().at(0); }
};

inline std::vector<double> random_values(size_t n, double lo, double hi, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<double> v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

// |got - want| <= abs + rel * |want| element by element; infinities must match exactly.
inline void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double rel,
                            double abs) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::isinf(want[i])) {
            EXPECT_EQ(got[i], want[i]) << "at " << i;
            continue;
        }
        EXPECT_NEAR(got[i], want[i], abs + rel * std::fabs(want[i])) << "at " << i;
    }
}

}  // namespace ember::kernels::norm_test
