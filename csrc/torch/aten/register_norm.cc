// Softmax, log_softmax, layer norm, the NLL loss (what cross_entropy decomposes into) and the
// MSE loss, with their backwards, on core's row kernels (kernels/norm). Rows are the last dimension of a
// contiguous tensor; other dims are moved last first. Unusual inputs take the CPU fallback.
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../context.h"
#include "../fallback.h"
#include "kernels/loss/ctc.h"
#include "kernels/norm/norm.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

bool float_type(const at::Tensor& t) { return at::isFloatingType(t.scalar_type()); }

// A contiguous tensor as [rows, cols]; writable=false for one the kernel only reads.
kernels::TensorView rows_view(const at::Tensor& t, int64_t cols, bool writable = true) {
    kernels::TensorView v = writable ? view_of(t) : view_in(t);
    int64_t rows = cols == 0 ? 0 : t.numel() / cols;
    v.ndim = 2;
    v.sizes[0] = rows;
    v.sizes[1] = cols;
    v.strides[0] = cols;
    v.strides[1] = 1;
    return v;
}

// A contiguous [cols] parameter vector, or an empty view (data == nullptr) when absent.
kernels::TensorView vector_view(const at::Tensor& t, int64_t cols, bool writable = true) {
    if (!t.defined()) return {};
    kernels::TensorView v = rows_view(t, cols, writable);
    v.ndim = 1;
    v.sizes[0] = cols;
    v.strides[0] = 1;
    return v;
}

// A [rows] statistics tensor (mean or rstd).
kernels::TensorView stats_view(const at::Tensor& t, bool writable = true) {
    kernels::TensorView v = rows_view(t, 1, writable);
    v.ndim = 1;
    return v;
}

// ---- softmax / log_softmax --------------------------------------------------------------------

at::Tensor softmax_impl(const at::Tensor& self, int64_t dim, bool log) {
    dim = at::maybe_wrap_dim(dim, self.dim());
    at::Tensor in = (self.dim() == 0 ? self.reshape({1}) : self.movedim(dim, -1)).contiguous();
    at::Tensor out = at::empty_like(in, at::MemoryFormat::Contiguous);
    int64_t cols = in.size(-1);
    if (in.numel() > 0) {
        kernels::TensorView o = rows_view(out, cols), i = rows_view(in, cols, false);
        queue(in, log ? "log_softmax" : "softmax",
              [o, i, log](runtime::ThreadPool* p) { return kernels::softmax(o, i, log, p); });
    }
    if (self.dim() == 0) return out.reshape({});
    return out.movedim(-1, dim).contiguous();
}

at::Tensor softmax_backward_impl(const at::Tensor& grad, const at::Tensor& output, int64_t dim, bool log) {
    dim = at::maybe_wrap_dim(dim, output.dim());
    auto last = [&](const at::Tensor& t) {
        return (t.dim() == 0 ? t.reshape({1}) : t.movedim(dim, -1)).contiguous();
    };
    at::Tensor g = last(grad), o = last(output);
    at::Tensor gin = at::empty_like(o, at::MemoryFormat::Contiguous);
    int64_t cols = o.size(-1);
    if (o.numel() > 0) {
        kernels::TensorView gi = rows_view(gin, cols), gv = rows_view(g, cols, false), ov = rows_view(o, cols, false);
        queue(o, log ? "log_softmax_backward" : "softmax_backward",
              [gi, gv, ov, log, k1 = g, k2 = o](runtime::ThreadPool* p) {
                  return kernels::softmax_backward(gi, gv, ov, log, p);
              });
    }
    if (output.dim() == 0) return gin.reshape({});
    return gin.movedim(-1, dim).contiguous();
}

#define EMBER_SOFTMAX(name, is_log)                                                                 \
    at::Tensor name##_fn(const at::Tensor& self, int64_t dim, bool half_to_float) {                 \
        if (half_to_float || !float_type(self)) return cpu<ATEN_OP(name)>(self, dim, half_to_float); \
        return softmax_impl(self, dim, is_log);                                                     \
    }                                                                                               \
    at::Tensor& name##_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out) { \
        if (half_to_float || !float_type(self) || out.scalar_type() != self.scalar_type())          \
            return cpu<ATEN_OP2(name, out)>(self, dim, half_to_float, out);                         \
        at::Tensor r = softmax_impl(self, dim, is_log);                                             \
        resize_out(out, r.sizes());                                                  \
        return out.copy_(r);                                                                        \
    }                                                                                               \
    at::Tensor name##_backward_fn(const at::Tensor& grad, const at::Tensor& output, int64_t dim,   \
                                  c10::ScalarType input_dtype) {                                    \
        if (!float_type(output) || grad.scalar_type() != output.scalar_type() ||                   \
            input_dtype != output.scalar_type() || !on_device(output.device(), grad))               \
            return cpu<ATEN_OP(name##_backward_data)>(grad, output, dim, input_dtype);             \
        return softmax_backward_impl(grad, output, dim, is_log);                                    \
    }

EMBER_SOFTMAX(_softmax, false)
EMBER_SOFTMAX(_log_softmax, true)
#undef EMBER_SOFTMAX

// ---- layer norm -------------------------------------------------------------------------------

// mean/rstd of a reduced-precision input are float32, as on CUDA and as PyTorch's fake
// implementation says for every device but the CPU (which keeps the input's dtype): compiled
// graphs are traced with that fake implementation, so eager results must agree with it.
c10::ScalarType stats_dtype(const at::Tensor& input, const std::optional<at::Tensor>&) {
    bool reduced = input.scalar_type() == at::kBFloat16 || input.scalar_type() == at::kHalf;
    return reduced ? at::kFloat : input.scalar_type();
}

// A weight or bias the kernel can read: a dtype it takes, and exactly normalized_shape's shape
// (anything else goes to the CPU, which raises its error; the kernel would read past it).
bool params_ok(const at::Tensor& input, const std::optional<at::Tensor>& p, at::IntArrayRef shape) {
    if (!p || !p->defined()) return true;
    return (p->scalar_type() == input.scalar_type() || p->scalar_type() == at::kFloat) && p->sizes().equals(shape);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(const at::Tensor& input, c10::SymIntArrayRef shape_sym,
                                                          const std::optional<at::Tensor>& weight,
                                                          const std::optional<at::Tensor>& bias, double eps) {
    at::IntArrayRef shape = C10_AS_INTARRAYREF_SLOW(shape_sym);
    int64_t axis = input.dim() - static_cast<int64_t>(shape.size());
    // No rows (an empty batch) is an empty result; empty rows of a non-empty batch go to the CPU.
    const bool no_rows = axis >= 0 && c10::multiply_integers(input.sizes().slice(0, axis)) == 0;
    bool ok = float_type(input) && !shape.empty() && axis >= 0 && input.sizes().slice(axis).equals(shape) &&
              params_ok(input, weight, shape) && params_ok(input, bias, shape) && (input.numel() > 0 || no_rows) &&
              on_device(input.device(), weight) && on_device(input.device(), bias);
    if (!ok) return cpu_symint<ATEN_OP(native_layer_norm)>(input, shape_sym, weight, bias, eps);
    int64_t cols = c10::multiply_integers(shape);
    at::Tensor x = input.contiguous();
    at::Tensor out = at::empty_like(x, at::MemoryFormat::Contiguous);
    std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().begin() + axis);
    stat_shape.resize(input.dim(), 1);
    at::Tensor mean = at::empty(stat_shape, x.options().dtype(stats_dtype(input, weight)));
    at::Tensor rstd = at::empty(stat_shape, mean.options());
    at::Tensor wk = weight && weight->defined() ? weight->contiguous() : at::Tensor();
    at::Tensor bk = bias && bias->defined() ? bias->contiguous() : at::Tensor();
    if (input.numel() == 0) return {out, mean, rstd};
    kernels::TensorView o = rows_view(out, cols), xv = rows_view(x, cols, false);
    kernels::TensorView mv = stats_view(mean), rv = stats_view(rstd);
    kernels::TensorView wv = vector_view(wk, cols, false), bv = vector_view(bk, cols, false);
    queue(x, "layer_norm", [o, mv, rv, xv, wv, bv, eps](runtime::ThreadPool* p) {
        return kernels::layer_norm(o, mv, rv, xv, wv, bv, eps, p);
    });
    return {out, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef shape_sym, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    std::array<bool, 3> mask) {
    at::IntArrayRef shape = C10_AS_INTARRAYREF_SLOW(shape_sym);
    bool ok = float_type(input) && grad_out.scalar_type() == input.scalar_type() && !shape.empty() &&
              params_ok(input, weight, shape) && params_ok(input, bias, shape) && on_device(input.device(), grad_out) &&
              on_device(input.device(), mean) && on_device(input.device(), rstd) && on_device(input.device(), weight);
    if (!ok) {
        return cpu_symint<ATEN_OP(native_layer_norm_backward)>(grad_out, input, shape_sym, mean, rstd, weight, bias, mask);
    }
    if (input.numel() == 0) {  // no rows: nothing flows back, parameters get zero gradients
        auto zeros_if = [](bool wanted, const std::optional<at::Tensor>& p) {
            return wanted && p && p->defined() ? at::zeros_like(*p) : at::Tensor();
        };
        return {mask[0] ? at::empty_like(input) : at::Tensor(), zeros_if(mask[1], weight), zeros_if(mask[2], bias)};
    }
    int64_t cols = c10::multiply_integers(shape);
    at::Tensor x = input.contiguous(), g = grad_out.contiguous();
    at::Tensor mc = mean.contiguous(), rc = rstd.contiguous();
    at::Tensor wk = weight && weight->defined() ? weight->contiguous() : at::Tensor();
    at::Tensor gi = mask[0] ? at::empty_like(x, at::MemoryFormat::Contiguous) : at::Tensor();
    at::Tensor gw = mask[1] && wk.defined() ? at::empty_like(wk) : at::Tensor();
    at::Tensor gb = mask[2] && bias && bias->defined() ? at::empty_like(bias->contiguous()) : at::Tensor();
    kernels::TensorView giv = gi.defined() ? rows_view(gi, cols) : kernels::TensorView{};
    kernels::TensorView gwv = vector_view(gw, cols), gbv = vector_view(gb, cols), wv = vector_view(wk, cols, false);
    kernels::TensorView gv = rows_view(g, cols, false), xv = rows_view(x, cols, false);
    kernels::TensorView mv = stats_view(mc, false), rv = stats_view(rc, false);
    queue(x, "layer_norm_backward",
          [giv, gwv, gbv, gv, xv, mv, rv, wv](runtime::ThreadPool* p) {
              return kernels::layer_norm_backward(giv, gwv, gbv, gv, xv, mv, rv, wv, p);
          });
    return {gi, gw, gb};
}

// ---- nll_loss ---------------------------------------------------------------------------------

bool nll_ok(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight) {
    // A weight of another length goes to the CPU, whose check words the error at once (the
    // kernel's would surface at the next synchronization).
    bool w_ok = !weight || !weight->defined() ||
                (weight->scalar_type() == self.scalar_type() && self.dim() > 0 && weight->dim() == 1 &&
                 weight->numel() == self.size(-1));
    return float_type(self) && target.scalar_type() == at::kLong && (self.dim() == 1 || self.dim() == 2) &&
           on_device(self.device(), target) && on_device(self.device(), weight) &&
           target.dim() == self.dim() - 1 && (self.dim() == 1 || target.size(0) == self.size(0)) && w_ok &&
           self.size(-1) > 0;
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    c10::SymInt ignore_index) {
    if (!nll_ok(self, target, weight)) {
        return cpu_symint<ATEN_OP(nll_loss_forward)>(self, target, weight, reduction, ignore_index);
    }
    int64_t classes = self.size(-1);
    at::Tensor logp = self.contiguous(), t = target.contiguous().reshape({-1});
    int64_t rows = t.size(0);
    bool per_row = reduction == at::Reduction::None && self.dim() == 2;
    at::Tensor out = per_row ? at::empty({rows}, self.options()) : at::empty({}, self.options());
    at::Tensor total = at::empty({}, self.options());
    at::Tensor wk = weight && weight->defined() ? weight->contiguous() : at::Tensor();
    kernels::TensorView lv = rows_view(logp, classes, false), tv = view_in(t), ov = view_of(out), totv = view_of(total);
    kernels::TensorView wv = wk.defined() ? view_in(wk) : kernels::TensorView{};
    int64_t red = per_row ? 0 : (reduction == at::Reduction::None ? 2 : reduction);
    int64_t ignore = ignore_index.expect_int();
    queue(logp, "nll_loss", [ov, totv, lv, tv, wv, red, ignore](runtime::ThreadPool* p) {
        return kernels::nll_loss(ov, totv, lv, tv, wv, red, ignore, p);
    });
    return {out, total};
}

at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                             const at::Tensor& total_weight) {
    if (!nll_ok(self, target, weight) || grad_output.scalar_type() != self.scalar_type() ||
        !on_device(self.device(), grad_output) || !on_device(self.device(), total_weight)) {
        return cpu_symint<ATEN_OP(nll_loss_backward)>(grad_output, self, target, weight, reduction, ignore_index, total_weight);
    }
    int64_t classes = self.size(-1);
    at::Tensor t = target.contiguous().reshape({-1});
    at::Tensor grad = at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
    at::Tensor go = grad_output.contiguous(), tw = total_weight.contiguous();
    at::Tensor wk = weight && weight->defined() ? weight->contiguous() : at::Tensor();
    bool per_row = reduction == at::Reduction::None && self.dim() == 2;
    kernels::TensorView gv = rows_view(grad, classes), gov = view_in(go), tv = view_in(t), twv = view_in(tw);
    kernels::TensorView wv = wk.defined() ? view_in(wk) : kernels::TensorView{};
    int64_t red = per_row ? 0 : (reduction == at::Reduction::None ? 2 : reduction);
    int64_t ignore = ignore_index.expect_int();
    queue(grad, "nll_loss_backward", [gv, gov, tv, wv, twv, red, ignore](runtime::ThreadPool* p) {
        return kernels::nll_loss_backward(gv, gov, tv, wv, twv, red, ignore, p);
    });
    return grad;
}

// nll_loss2d ((N, C, H, W) scores, (N, H, W) targets; also what nll_loss of 3-d and 5-d or more
// dims reshapes to) as nll_loss over the N*H*W rows of the scores moved to channels-last: the
// same kernel, which sums in float and rounds once, as the CPU does (PyTorch's decomposition
// summed and divided in the 16-bit type, up to 1.5 ulp off).
bool nll2d_ok(const at::Tensor& self, const at::Tensor& target) {
    return self.dim() == 4 && target.dim() == 3 && target.size(0) == self.size(0) &&
           target.size(1) == self.size(2) && target.size(2) == self.size(3);
}

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self, const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight, int64_t reduction,
                                                      c10::SymInt ignore_index) {
    if (!nll2d_ok(self, target)) {
        return cpu_symint<ATEN_OP(nll_loss2d_forward)>(self, target, weight, reduction, ignore_index);
    }
    const int64_t C = self.size(1);
    at::Tensor rows = self.permute({0, 2, 3, 1}).reshape({-1, C});
    auto [out, total] = nll_loss_forward(rows, target.reshape({-1}), weight, reduction, ignore_index);
    if (reduction == at::Reduction::None) out = out.view(target.sizes());
    return {out, total};
}

at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                               const at::Tensor& total_weight) {
    if (!nll2d_ok(self, target) || (reduction == at::Reduction::None && !grad_output.sizes().equals(target.sizes()))) {
        return cpu_symint<ATEN_OP(nll_loss2d_backward)>(grad_output, self, target, weight, reduction, ignore_index,
                                                        total_weight);
    }
    const int64_t N = self.size(0), C = self.size(1), H = self.size(2), W = self.size(3);
    // The backward reads only the scores' shape and dtype: a zero-copy stand-in of the rows' shape.
    at::Tensor rows = self.new_empty({1, C}).expand({N * H * W, C});
    at::Tensor go = reduction == at::Reduction::None ? grad_output.reshape({-1}) : grad_output;
    at::Tensor g = nll_loss_backward(go, rows, target.reshape({-1}), weight, reduction, ignore_index, total_weight);
    return g.view({N, H, W, C}).permute({0, 3, 1, 2}).contiguous(self.suggest_memory_format());
}

// ---- ctc_loss ------------------------------------------------------------------------------------
// float32/float64 log_probs [T, N, C] on ember with int32/int64 targets there and lengths that the
// CPU's checks accept; anything else takes the CPU path, whose checks word the errors. `states`
// gets log_alpha's last size, the CPU's: 2 * the longest target + 1 (padded targets: their width).

std::optional<kernels::CtcBatch> ctc_batch(const at::Tensor& lp, const at::Tensor& targets, at::IntArrayRef il,
                                           at::IntArrayRef tl, int64_t blank, int64_t& states) {
    const auto t = lp.scalar_type(), lt = targets.scalar_type();
    if (!lp.is_privateuseone() || lp.dim() != 3 || (t != at::kFloat && t != at::kDouble) ||
        !on_device(lp.device(), targets) || (lt != at::kInt && lt != at::kLong) ||
        (targets.dim() != 1 && targets.dim() != 2))
        return std::nullopt;
    const int64_t frames = lp.size(0), n = lp.size(1), classes = lp.size(2);
    if (n == 0 || blank < 0 || blank >= classes || static_cast<int64_t>(il.size()) != n ||
        static_cast<int64_t>(tl.size()) != n)
        return std::nullopt;
    kernels::CtcBatch batch;
    batch.blank = blank;
    int64_t longest = 0, total = 0;
    for (int64_t b = 0; b < n; ++b) {
        if (il[b] < 0 || il[b] > frames || tl[b] < 0) return std::nullopt;
        longest = std::max(longest, tl[b]);
        batch.target_offsets.push_back(targets.dim() == 1 ? total * targets.stride(0) : b * targets.stride(0));
        total += tl[b];
    }
    if (targets.dim() == 1) {
        if (targets.size(0) != total) return std::nullopt;
        batch.target_stride = targets.stride(0);
        states = 2 * longest + 1;
    } else {
        if (targets.size(0) != n || targets.size(1) < longest) return std::nullopt;
        batch.target_stride = targets.stride(1);
        states = 2 * targets.size(1) + 1;
    }
    batch.input_lengths.assign(il.begin(), il.end());
    batch.target_lengths.assign(tl.begin(), tl.end());
    return batch;
}

std::tuple<at::Tensor, at::Tensor> ctc_loss(const at::Tensor& lp, const at::Tensor& targets, at::IntArrayRef il,
                                            at::IntArrayRef tl, int64_t blank, bool zero_infinity) {
    int64_t states = 0;
    std::optional<kernels::CtcBatch> batch = ctc_batch(lp, targets, il, tl, blank, states);
    if (!batch) return cpu<ATEN_OP(_ctc_loss)>(lp, targets, il, tl, blank, zero_infinity);
    at::Tensor nll = at::empty({lp.size(1)}, lp.options());
    at::Tensor alpha = at::empty({lp.size(1), lp.size(0), states}, lp.options());
    kernels::TensorView nv = view_of(nll), av = view_of(alpha), lv = view_in(lp), tv = view_in(targets);
    queue(nll, "ctc_loss", [nv, av, lv, tv, b = std::move(*batch)](runtime::ThreadPool* p) {
        return kernels::ctc_loss_forward(nv, av, lv, tv, b, p);
    });
    return {nll, alpha};
}

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& lp, const at::Tensor& targets,
                             at::IntArrayRef il, at::IntArrayRef tl, const at::Tensor& nll, const at::Tensor& alpha,
                             int64_t blank, bool zero_infinity) {
    int64_t states = 0;
    std::optional<kernels::CtcBatch> batch = ctc_batch(lp, targets, il, tl, blank, states);
    const auto same = [&](const at::Tensor& x, int64_t dims) {
        return on_device(lp.device(), x) && x.scalar_type() == lp.scalar_type() && x.dim() == dims;
    };
    if (!batch || !same(grad, 1) || !same(nll, 1) || !same(alpha, 3) || grad.size(0) != lp.size(1) ||
        nll.size(0) != lp.size(1) || alpha.size(0) != lp.size(1) || alpha.size(1) != lp.size(0) ||
        alpha.size(2) != states)
        return cpu<ATEN_OP(_ctc_loss_backward)>(grad, lp, targets, il, tl, nll, alpha, blank, zero_infinity);
    at::Tensor out = at::empty(lp.sizes(), lp.options().memory_format(at::MemoryFormat::Contiguous));
    at::Tensor a = alpha.contiguous();
    kernels::TensorView ov = view_of(out), gv = view_in(grad), lv = view_in(lp), tv = view_in(targets);
    kernels::TensorView nv = view_in(nll), av = view_in(a);
    queue(out, "ctc_loss_backward", [ov, gv, lv, tv, nv, av, b = std::move(*batch), zero_infinity](runtime::ThreadPool* p) {
        return kernels::ctc_loss_backward(ov, gv, lv, tv, nv, av, b, zero_infinity, p);
    });
    return out;
}

// The overloads with lengths as tensors read them on the host, as the CPU's do.
std::vector<int64_t> host_lengths(const at::Tensor& lengths) {
    at::Tensor h = lengths.to(at::kCPU, at::kLong).contiguous();
    return {h.data_ptr<int64_t>(), h.data_ptr<int64_t>() + h.numel()};
}

bool integral_lengths(const at::Tensor& a, const at::Tensor& b) {
    return at::isIntegralType(a.scalar_type(), false) && at::isIntegralType(b.scalar_type(), false) && a.dim() == 1 &&
           b.dim() == 1;
}

std::tuple<at::Tensor, at::Tensor> ctc_loss_tensor(const at::Tensor& lp, const at::Tensor& targets,
                                                   const at::Tensor& il, const at::Tensor& tl, int64_t blank,
                                                   bool zero_infinity) {
    if (!integral_lengths(il, tl)) return cpu<ATEN_OP2(_ctc_loss, Tensor)>(lp, targets, il, tl, blank, zero_infinity);
    return ctc_loss(lp, targets, host_lengths(il), host_lengths(tl), blank, zero_infinity);
}

at::Tensor ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& lp, const at::Tensor& targets,
                                    const at::Tensor& il, const at::Tensor& tl, const at::Tensor& nll,
                                    const at::Tensor& alpha, int64_t blank, bool zero_infinity) {
    if (!integral_lengths(il, tl))
        return cpu<ATEN_OP2(_ctc_loss_backward, Tensor)>(grad, lp, targets, il, tl, nll, alpha, blank, zero_infinity);
    return ctc_loss_backward(grad, lp, targets, host_lengths(il), host_lengths(tl), nll, alpha, blank, zero_infinity);
}

// ---- mse_loss, composed from native elementwise and reduction ops ----------------------------

bool native_mse(const at::Tensor& self, const at::Tensor& target) {
    return float_type(self) && self.scalar_type() == target.scalar_type();
}

at::Tensor& mse_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, at::Tensor& out) {
    if (!native_mse(self, target)) return cpu<ATEN_OP2(mse_loss, out)>(self, target, reduction, out);
    at::Tensor d = at::sub(self, target);
    d.mul_(d);
    if (reduction == at::Reduction::Mean) return at::mean_out(out, d, at::IntArrayRef{});
    if (reduction == at::Reduction::Sum) return at::sum_out(out, d, at::IntArrayRef{});
    resize_out(out, d.sizes());
    return out.copy_(d);
}

at::Tensor mse_loss_fn(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
    at::Tensor out = at::empty({0}, self.options());
    return mse_loss_out(self, target, reduction, out);
}

at::Tensor& mse_loss_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                  int64_t reduction, at::Tensor& grad_input) {
    if (!native_mse(self, target))
        return cpu<ATEN_OP2(mse_loss_backward, grad_input)>(grad, self, target, reduction, grad_input);
    const double norm = reduction == at::Reduction::Mean ? 2.0 / static_cast<double>(self.numel()) : 2.0;
    at::Tensor d = at::sub(self, target).mul_(norm);
    return at::mul_out(grad_input, d, grad);
}

at::Tensor mse_loss_backward_fn(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                int64_t reduction) {
    at::Tensor grad_input = at::empty({0}, self.options());
    return mse_loss_backward_out(grad, self, target, reduction, grad_input);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_softmax", _softmax_fn);
    m.impl("_softmax.out", _softmax_out);
    m.impl("_softmax_backward_data", _softmax_backward_fn);
    m.impl("_log_softmax", _log_softmax_fn);
    m.impl("_log_softmax.out", _log_softmax_out);
    m.impl("_log_softmax_backward_data", _log_softmax_backward_fn);
    m.impl("native_layer_norm", layer_norm);
    m.impl("native_layer_norm_backward", layer_norm_backward);
    m.impl("nll_loss_forward", nll_loss_forward);
    m.impl("nll_loss_backward", nll_loss_backward);
    m.impl("nll_loss2d_forward", nll_loss2d_forward);
    m.impl("nll_loss2d_backward", nll_loss2d_backward);
    m.impl("_ctc_loss", ctc_loss);
    m.impl("_ctc_loss.Tensor", ctc_loss_tensor);
    m.impl("_ctc_loss_backward", ctc_loss_backward);
    m.impl("_ctc_loss_backward.Tensor", ctc_loss_backward_tensor);
    m.impl("mse_loss", mse_loss_fn);
    m.impl("mse_loss.out", mse_loss_out);
    m.impl("mse_loss_backward", mse_loss_backward_fn);
    m.impl("mse_loss_backward.grad_input", mse_loss_backward_out);
}

}  // namespace ember::torch_glue
