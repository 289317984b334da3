#include "kernels/fill.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace ember::kernels {

TEST(Fill, StridedAndConverted) {
    std::vector<int32_t> data(8, -1);
    TensorView v;
    v.data = data.data();
    v.dtype = DType::kInt32;
    v.ndim = 1;
    v.sizes[0] = 4;
    v.strides[0] = 2;  // every other element
    Scalar s;
    s.kind = Scalar::Kind::kFloat;
    s.f = 2.9;
    ASSERT_TRUE(fill(v, s, nullptr).ok());
    EXPECT_EQ(data, (std::vector<int32_t>{2, -1, 2, -1, 2, -1, 2, -1}));
}

TEST(Fill, ZeroAndBFloat16) {
    runtime::ThreadPool pool(2);
    std::vector<uint16_t> data(100000, 0xffff);
    TensorView v;
    v.data = data.data();
    v.dtype = DType::kBFloat16;
    v.ndim = 2;
    v.sizes[0] = 1000;
    v.sizes[1] = 100;
    v.strides[0] = 100;
    v.strides[1] = 1;
    Scalar one;
    one.kind = Scalar::Kind::kInt;
    one.i = 1;
    ASSERT_TRUE(fill(v, one, &pool).ok());
    for (auto x : data) ASSERT_EQ(x, 0x3f80);
    Scalar zero;
    ASSERT_TRUE(fill(v, zero, &pool).ok());
    for (auto x : data) ASSERT_EQ(x, 0);
}

}  // namespace ember::kernels
