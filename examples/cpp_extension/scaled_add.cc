// An ahead-of-time C++ extension that adds an operator with a CPU kernel and an ember kernel:
// ember_example::scaled_add(a, b, alpha) = a + alpha * b, for float32 tensors of one shape.
// Built and tested by tests/python/test_cpp_extension.py; the README shows the build.
#include <torch/extension.h>

#include <cmath>

#include <torch_ember/extension.h>

namespace {

void check(const at::Tensor& a, const at::Tensor& b) {
    TORCH_CHECK(a.sizes() == b.sizes(), "scaled_add: shapes differ: ", a.sizes(), " and ", b.sizes());
    TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "scaled_add: float32 only, got ",
                a.scalar_type(), " and ", b.scalar_type());
}

at::Tensor scaled_add_cpu(const at::Tensor& a, const at::Tensor& b, double alpha) {
    check(a, b);
    return a + alpha * b;
}

at::Tensor scaled_add_ember(const at::Tensor& a, const at::Tensor& b, double alpha) {
    check(a, b);
    at::Tensor ac = a.contiguous(), bc = b.contiguous();
    at::Tensor out = at::empty_like(ac);
    auto x = ember::ext::view<const float>(ac);
    auto y = ember::ext::view<const float>(bc);
    auto o = ember::ext::view<float>(out);
    const int device = out.device().index();
    const float k = static_cast<float>(alpha);
    ember::ext::enqueue(device, "ember_example::scaled_add", [=] {
        if (!std::isfinite(k)) return ember::ext::Error("alpha must be finite");
        ember::ext::parallel_for(device, o.numel(), 1 << 14, [=](int64_t lo, int64_t hi) {
            for (int64_t i = lo; i < hi; ++i) o.data[i] = x.data[i] + k * y.data[i];
        });
        return ember::ext::Error();
    });
    return out;
}

}  // namespace

TORCH_LIBRARY(ember_example, m) { m.def("scaled_add(Tensor a, Tensor b, float alpha) -> Tensor"); }
TORCH_LIBRARY_IMPL(ember_example, CPU, m) { m.impl("scaled_add", scaled_add_cpu); }
EMBER_LIBRARY_IMPL(ember_example, m) { m.impl("scaled_add", scaled_add_ember); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}
