// Random ops on the device's counter-based generator (kernels/random): uniform_, normal_,
// bernoulli_, random_ (randint), randperm, dropout, and Gamma and Dirichlet samples. Each call reserves its draws from the generator's (seed, offset)
// under the generator's lock, then queues the kernel, so seeding reproduces the numbers and
// get_rng_state/set_rng_state replay them, as on CUDA.
#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <mutex>

#include "../context.h"
#include "../fallback.h"
#include "../generator.h"
#include "../graph_capture.h"
#include "kernels/random/random.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

kernels::PhiloxState reserve(const std::optional<at::Generator>& generator, const at::Tensor& self, uint64_t draws) {
    check_not_capturing(tensor_device(self).index(), "random numbers",
                        "every replay would repeat the numbers drawn at capture time. Draw them outside the "
                        "graph into a tensor it reads.");
    at::Generator gen = generator.has_value() && generator->defined() ? *generator : default_generator(self.device().index());
    TORCH_CHECK(gen.device().type() == c10::DeviceType::PrivateUse1,
                "Expected a 'ember' device type for generator but found '", gen.device().type(), "'");
    std::lock_guard<std::mutex> lock(gen.mutex());
    auto [seed, offset] = gen.get<EmberGenerator>()->philox_engine_inputs(draws);
    return {seed, offset};
}

template <typename F>
at::Tensor& queue_random(at::Tensor& self, const char* name, F&& fn) {
    if (self.numel() == 0) return self;
    c10::DeviceGuard guard(self.device());
    runtime::Device& dev = tensor_device(self);
    runtime::ThreadPool* pool = &dev.pool();
    kernels::TensorView v = view_of(self);
    enqueue(dev.current_stream(), name, [v, pool, fn = std::forward<F>(fn)] { return fn(v, pool); });
    return self;
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> generator) {
    if (!at::isFloatingType(self.scalar_type())) return cpu<ATEN_OP(uniform_)>(self, from, to, generator);
    TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
    // A range wider than the dtype holds (to - from overflows): the CPU's check and message.
    double limit = 0;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "uniform_bounds", [&] {
        limit = static_cast<double>(std::numeric_limits<scalar_t>::max());
    });
    if (!(to - from <= limit) || from < -limit || to > limit) return cpu<ATEN_OP(uniform_)>(self, from, to, generator);
    auto rng = reserve(generator, self, kernels::uniform_draws(self.numel(), to_dtype(self.scalar_type())));
    return queue_random(self, "uniform_", [from, to, rng](const kernels::TensorView& v, runtime::ThreadPool* p) {
        return kernels::uniform(v, from, to, rng, p);
    });
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> generator) {
    if (self.is_complex() && !self.is_conj() && has_dtype(c10::toRealValueType(self.scalar_type()))) {
        // As on the CPU: real and imaginary parts each get half the variance (torch.randn(cfloat)).
        TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
        at::Tensor parts = at::view_as_real(self);
        normal_(parts, mean, std / std::sqrt(2.0), generator);
        return self;
    }
    if (!at::isFloatingType(self.scalar_type())) return cpu<ATEN_OP(normal_)>(self, mean, std, generator);
    TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
    auto rng = reserve(generator, self, kernels::normal_draws(self.numel(), to_dtype(self.scalar_type())));
    return queue_random(self, "normal_", [mean, std, rng](const kernels::TensorView& v, runtime::ThreadPool* p) {
        return kernels::normal(v, mean, std, rng, p);
    });
}

at::Tensor& bernoulli_(at::Tensor& self, double p, std::optional<at::Generator> generator) {
    if (self.is_complex()) return cpu<ATEN_OP2(bernoulli_, float)>(self, p, generator);
    TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
    at::assert_no_internal_overlap(self);  // an expanded self: the CPU refuses it too
    auto rng = reserve(generator, self, kernels::uniform_draws(self.numel()));
    return queue_random(self, "bernoulli_", [p, rng](const kernels::TensorView& v, runtime::ThreadPool* pool) {
        return kernels::bernoulli(v, p, rng, pool);
    });
}

// Whether every integer in [from, to) is exact in the dtype: integers always (PyTorch checks
// the bounds against the dtype), floating types up to their mantissa.
bool exact_range(at::ScalarType t, int64_t from, int64_t to) {
    if (!has_dtype(t)) return false;  // uint16/32/64: the CPU draws them, and checks the bounds
    if (at::isIntegralType(t, /*includeBool=*/true)) {
        // Bounds outside the dtype go to the CPU, whose check words the error ("from is out of
        // bounds"); the kernel would wrap them into the dtype.
        int64_t lo = 0, hi = 1;
        if (t != at::kBool) AT_DISPATCH_INTEGRAL_TYPES(t, "random_bounds", [&] {
            lo = static_cast<int64_t>(std::numeric_limits<scalar_t>::lowest());
            hi = static_cast<int64_t>(std::numeric_limits<scalar_t>::max());
        });
        return from >= lo && from <= hi && to - 1 >= lo && to - 1 <= hi;
    }
    int digits = t == at::kDouble ? 53 : t == at::kFloat ? 24 : t == at::kHalf ? 11 : t == at::kBFloat16 ? 8 : -1;
    if (digits < 0) return false;
    const int64_t limit = int64_t{1} << digits;
    return from >= -limit && to <= limit;
}

at::Tensor& random_from_(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                         std::optional<at::Generator> generator) {
    if (!to.has_value() || self.is_complex() || !exact_range(self.scalar_type(), from, *to))
        return cpu<ATEN_OP2(random_, from)>(self, from, to, generator);
    TORCH_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", *to);
    const uint64_t range = static_cast<uint64_t>(*to) - static_cast<uint64_t>(from);
    auto rng = reserve(generator, self, kernels::integer_draws(self.numel(), range));
    return queue_random(self, "random_", [from, range, rng](const kernels::TensorView& v, runtime::ThreadPool* p) {
        return kernels::random_integers(v, from, range, rng, p);
    });
}

at::Tensor& random_to_(at::Tensor& self, int64_t to, std::optional<at::Generator> generator) {
    return random_from_(self, 0, to, generator);
}

at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> generator, at::Tensor& out) {
    TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
    if (out.scalar_type() != at::kLong) return cpu<ATEN_OP2(randperm, generator_out)>(n, generator, out);
    out.resize_({n});
    auto rng = reserve(generator, out, kernels::uniform_draws(n));
    return queue_random(out, "randperm", [rng](const kernels::TensorView& v, runtime::ThreadPool*) {
        return kernels::randperm(v, rng);
    });
}

// Gamma(alpha, 1) samples (torch.distributions' Gamma, Beta, Dirichlet, Chi2, StudentT), float32
// and float64 as on the CPU (which refuses the rest: its error then comes from the fallback).
at::Tensor standard_gamma(const at::Tensor& alpha, std::optional<at::Generator> generator) {
    const auto t = alpha.scalar_type();
    if (t != at::kFloat && t != at::kDouble) return cpu<ATEN_OP(_standard_gamma)>(alpha, generator);
    at::Tensor out = at::empty(alpha.sizes(), alpha.options());
    auto rng = reserve(generator, out, kernels::gamma_draws(out.numel()));
    kernels::TensorView a = view_of(alpha);
    return queue_random(out, "_standard_gamma", [a, rng](const kernels::TensorView& v, runtime::ThreadPool* p) {
        return kernels::standard_gamma(v, a, rng, p);
    });
}

// Poisson(rate) samples (torch.poisson; torch.distributions.Poisson), float32 and float64.
at::Tensor poisson(const at::Tensor& rate, std::optional<at::Generator> generator) {
    const auto t = rate.scalar_type();
    if (t != at::kFloat && t != at::kDouble) return cpu<ATEN_OP(poisson)>(rate, generator);
    at::Tensor out = at::empty(rate.sizes(), rate.options());
    auto rng = reserve(generator, out, kernels::gamma_draws(out.numel()));
    kernels::TensorView r = view_in(rate);
    return queue_random(out, "poisson", [r, rng](const kernels::TensorView& v, runtime::ThreadPool* p) {
        return kernels::poisson(v, r, rng, p);
    });
}

// Dirichlet samples as the CPU draws them: Gamma samples in float64 (so that small
// concentrations do not underflow to the floor), normalized along the last dim, then rounded to
// alpha's dtype and kept inside [smallest normal, largest value below 1].
at::Tensor sample_dirichlet(const at::Tensor& alpha, std::optional<at::Generator> generator) {
    const auto t = alpha.scalar_type();
    if ((t != at::kFloat && t != at::kDouble) || alpha.dim() == 0) return cpu<ATEN_OP(_sample_dirichlet)>(alpha, generator);
    at::Tensor gamma = at::empty(alpha.sizes(), alpha.options().dtype(at::kDouble));
    auto rng = reserve(generator, gamma, kernels::gamma_draws(gamma.numel()));
    kernels::TensorView a = view_of(alpha);
    queue_random(gamma, "_sample_dirichlet", [a, rng](const kernels::TensorView& v, runtime::ThreadPool* p) {
        return kernels::standard_gamma(v, a, rng, p);
    });
    at::Tensor out = gamma.div(gamma.sum(-1, true)).to(t);
    const double below_one = t == at::kFloat ? std::nextafter(1.0f, 0.0f) : std::nextafter(1.0, 0.0);
    const double tiny = t == at::kFloat ? std::numeric_limits<float>::min() : std::numeric_limits<double>::min();
    return out.clamp_(tiny, below_one);
}

// As PyTorch's CPU dropout: mask ~ Bernoulli(1 - p), output = input * mask / (1 - p).
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
    if (!at::isFloatingType(input.scalar_type())) return cpu<ATEN_OP(native_dropout)>(input, p, train);
    if (train.has_value() && !*train) {
        return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
    }
    TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
    at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
    if (p == 1) {
        mask.zero_();
        return {at::zeros_like(input), mask};
    }
    if (p == 0) {  // keeps everything without drawing (and so can be captured in a graph)
        mask.fill_(true);
        return {input.clone(), mask};
    }
    bernoulli_(mask, 1 - p, std::nullopt);
    double scale = 1.0 / (1.0 - p);
    return {input.mul(mask).mul_(scale), mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
    if (!at::isFloatingType(grad.scalar_type())) return cpu<ATEN_OP(native_dropout_backward)>(grad, mask, scale);
    return grad.mul(mask).mul_(scale);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("uniform_", uniform_);
    m.impl("normal_", normal_);
    m.impl("bernoulli_.float", bernoulli_);
    m.impl("random_.from", random_from_);
    m.impl("random_.to", random_to_);
    m.impl("randperm.generator_out", randperm_out);
    m.impl("native_dropout", native_dropout);
    m.impl("native_dropout_backward", native_dropout_backward);
    m.impl("_standard_gamma", standard_gamma);
    m.impl("poisson", poisson);
    m.impl("_sample_dirichlet", sample_dirichlet);
}

}  // namespace ember::torch_glue
