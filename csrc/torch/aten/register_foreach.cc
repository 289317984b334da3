// The _foreach_* ops optimizers and clip_grad_norm_ use, fused Adam/AdamW and AMP's loss-scaling
// pair (unscale + inf check, scale update), as one device
// task per call: every
// tensor of the list is a flat 1-d loop of core's elementwise kernels, without building a
// TensorIterator per tensor. Lists that are not all contiguous, same-dtype floating tensors on
// one ember device take PyTorch's per-tensor path, which dispatches to the native single-tensor
// kernels, so results are the same either way.
#include <ATen/ATen.h>
#include <ATen/ops/_foreach_add_native.h>
#include <ATen/ops/_foreach_addcdiv_native.h>
#include <ATen/ops/_foreach_addcmul_native.h>
#include <ATen/ops/_foreach_div_native.h>
#include <ATen/ops/_foreach_lerp_native.h>
#include <ATen/ops/_foreach_mul_native.h>
#include <ATen/ops/_foreach_sqrt_native.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale_ops.h>
#include <ATen/ops/_amp_update_scale_ops.h>
#include <ATen/ops/_fused_adam_ops.h>
#include <ATen/ops/_fused_adamw_ops.h>
#include <torch/library.h>

#include <memory>
#include <vector>

#include "elementwise_iter.h"
#include "kernels/optim/adamw.h"
#include "kernels/optim/amp_scale.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

using kernels::BinaryOp;
using kernels::TernaryOp;
using kernels::UnaryOp;

// One kernel call of a batch. Scalars live in the batch (host memory the device reads), so the
// loops can point at them with a zero stride.
struct Job {
    enum class Kind : int8_t { kUnary, kBinary, kTernary } kind;
    int8_t op;
    kernels::ElementwiseLoop loop;
    kernels::DType compute;
    kernels::Scalar value;  // binary: alpha; ternary: value
};

struct Batch {
    std::vector<Job> jobs;
    std::unique_ptr<double[]> scalars;  // one per job at most
};

// All of `lists` hold contiguous tensors of one floating dtype on one ember device, pairwise
// of equal size.
bool flat_ok(std::initializer_list<at::TensorList> lists) {
    const at::TensorList first = *lists.begin();
    if (first.empty()) return false;
    const at::Tensor& ref = first[0];
    if (!ref.is_privateuseone() || !at::isFloatingType(ref.scalar_type())) return false;
    for (at::TensorList l : lists) {
        if (l.size() != first.size()) return false;
        for (size_t i = 0; i < l.size(); ++i) {
            const at::Tensor& t = l[i];
            if (!t.defined() || t.device() != ref.device() || t.scalar_type() != ref.scalar_type() ||
                !t.is_contiguous() || t.numel() != first[i].numel()) {
                return false;
            }
        }
    }
    return true;
}

// A tensor that can stand in as a broadcast scalar operand (clip_grad_norm_'s coefficient).
bool scalar_operand_ok(const at::Tensor& t, const at::Tensor& like) {
    return t.defined() && t.numel() == 1 && t.device() == like.device() && at::isFloatingType(t.scalar_type());
}

void add_operand(kernels::ElementwiseLoop& loop, void* data, kernels::DType dtype, int64_t stride) {
    const int k = loop.nops++;
    loop.data[k] = static_cast<char*>(data);
    loop.dtype[k] = dtype;
    loop.strides[k][0] = stride;
}

void add_tensor(kernels::ElementwiseLoop& loop, const at::Tensor& t) {
    add_operand(loop, t.data_ptr(), to_dtype(t.scalar_type()), static_cast<int64_t>(t.element_size()));
}

kernels::ElementwiseLoop flat_loop(const at::Tensor& out) {
    kernels::ElementwiseLoop loop;
    loop.ndim = 1;
    loop.shape[0] = out.numel();
    add_tensor(loop, out);
    return loop;
}

// Builds one job per tensor with `make(i, loop, scalar_slot)` and queues them as one task.
template <typename Make>
void queue_batch(at::TensorList outs, const char* name, Job::Kind kind, int8_t op, Make make) {
    auto batch = std::make_shared<Batch>();
    batch->scalars.reset(new double[outs.size()]);
    const kernels::DType compute = to_dtype(outs[0].scalar_type());
    for (size_t i = 0; i < outs.size(); ++i) {
        if (outs[i].numel() == 0) continue;
        Job job{kind, op, flat_loop(outs[i]), compute, {}};
        make(i, job, &batch->scalars[i]);
        batch->jobs.push_back(job);
    }
    queue(outs[0], name, [batch](runtime::ThreadPool* pool) {
        auto run = [](const Job& j, runtime::ThreadPool* p) {
            switch (j.kind) {
                case Job::Kind::kUnary: return kernels::unary(static_cast<UnaryOp>(j.op), j.loop, j.compute, p);
                case Job::Kind::kBinary:
                    return kernels::binary(static_cast<BinaryOp>(j.op), j.loop, j.compute, j.value, p);
                case Job::Kind::kTernary:
                    return kernels::ternary(static_cast<TernaryOp>(j.op), j.loop, j.compute, j.value, p);
            }
            return Status();
        };
        const auto& jobs = batch->jobs;
        return pool->for_each_item(static_cast<int64_t>(jobs.size()), [&](int64_t i, runtime::ThreadPool* p) {
            return run(jobs[static_cast<size_t>(i)], p);
        });
    });
}

kernels::Scalar one() {
    kernels::Scalar s;
    s.kind = kernels::Scalar::Kind::kInt;
    s.i = 1;
    return s;
}

// self[i] = self[i] <op> scalar(i), with the scalar broadcast from host memory.
template <typename ScalarOf>
void binary_with_scalar(at::TensorList self, BinaryOp op, const char* name, ScalarOf scalar_of) {
    queue_batch(self, name, Job::Kind::kBinary, static_cast<int8_t>(op), [&](size_t i, Job& job, double* slot) {
        add_tensor(job.loop, self[i]);
        *slot = scalar_of(i);
        add_operand(job.loop, slot, kernels::DType::kFloat64, 0);
        job.value = one();
    });
}

// A Python scalar as the CPU's foreach add and mul take it for a float16/bfloat16 tensor: rounded
// to the tensor's dtype first (its per-tensor mul keeps it in float; the foreach op does not).
double scalar_as_cpu_foreach(const at::Tensor& t, double v) {
    if (t.scalar_type() == at::kBFloat16) return static_cast<float>(c10::BFloat16(static_cast<float>(v)));
    if (t.scalar_type() == at::kHalf) return static_cast<float>(c10::Half(static_cast<float>(v)));
    return v;
}

// ---- the ops --------------------------------------------------------------------------------

void add_scalar_(at::TensorList self, const at::Scalar& s) {
    if (!flat_ok({self}) || s.isComplex()) return at::native::foreach_tensor_add_scalar_kernel_slow_(self, s);
    binary_with_scalar(self, BinaryOp::kAdd, "_foreach_add_",
                       [&, v = s.toDouble()](size_t i) { return scalar_as_cpu_foreach(self[i], v); });
}

void add_list_(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {
    if (!flat_ok({self, other}) || alpha.isComplex())
        return at::native::foreach_tensor_add_list_kernel_slow_(self, other, alpha);
    queue_batch(self, "_foreach_add_", Job::Kind::kBinary, static_cast<int8_t>(BinaryOp::kAdd),
                [&](size_t i, Job& job, double*) {
                    add_tensor(job.loop, self[i]);
                    add_tensor(job.loop, other[i]);
                    job.value = alpha_scalar(alpha, self[i].scalar_type());
                });
}

void mul_scalar_(at::TensorList self, const at::Scalar& s) {
    if (!flat_ok({self}) || s.isComplex()) return at::native::foreach_tensor_mul_scalar_kernel_slow_(self, s);
    binary_with_scalar(self, BinaryOp::kMul, "_foreach_mul_",
                       [&, v = s.toDouble()](size_t i) { return scalar_as_cpu_foreach(self[i], v); });
}

void mul_tensor_(at::TensorList self, const at::Tensor& other) {
    if (!flat_ok({self}) || !scalar_operand_ok(other, self[0]))
        return at::native::foreach_tensor_mul_tensor_kernel_slow_(self, other);
    queue_batch(self, "_foreach_mul_", Job::Kind::kBinary, static_cast<int8_t>(BinaryOp::kMul),
                [&](size_t i, Job& job, double*) {
                    add_tensor(job.loop, self[i]);
                    add_operand(job.loop, other.data_ptr(), to_dtype(other.scalar_type()), 0);
                    job.value = one();
                });
}

void div_scalarlist_(at::TensorList self, at::ArrayRef<at::Scalar> scalars) {
    if (!flat_ok({self}) || scalars.size() != self.size())
        return at::native::foreach_tensor_div_scalarlist_kernel_slow_(self, scalars);
    for (const auto& s : scalars)
        if (s.isComplex()) return at::native::foreach_tensor_div_scalarlist_kernel_slow_(self, scalars);
    binary_with_scalar(self, BinaryOp::kDiv, "_foreach_div_", [&](size_t i) { return scalars[i].toDouble(); });
}

std::vector<at::Tensor> sqrt(at::TensorList self) {
    if (!flat_ok({self})) return at::native::foreach_tensor_sqrt_slow(self);
    std::vector<at::Tensor> outs;
    outs.reserve(self.size());
    for (const at::Tensor& t : self) outs.push_back(at::empty_like(t));
    queue_batch(outs, "_foreach_sqrt", Job::Kind::kUnary, static_cast<int8_t>(UnaryOp::kSqrt),
                [&](size_t i, Job& job, double*) { add_tensor(job.loop, self[i]); });
    return outs;
}

void sqrt_(at::TensorList self) {
    if (!flat_ok({self})) return at::native::foreach_tensor_sqrt_slow_(self);
    queue_batch(self, "_foreach_sqrt_", Job::Kind::kUnary, static_cast<int8_t>(UnaryOp::kSqrt),
                [&](size_t i, Job& job, double*) { add_tensor(job.loop, self[i]); });
}

void lerp_scalar_(at::TensorList self, at::TensorList end, const at::Scalar& weight) {
    if (!flat_ok({self, end}) || weight.isComplex())
        return at::native::foreach_tensor_lerp_list_kernel_slow_(self, end, weight);
    queue_batch(self, "_foreach_lerp_", Job::Kind::kTernary, static_cast<int8_t>(TernaryOp::kLerp),
                [&](size_t i, Job& job, double* slot) {
                    add_tensor(job.loop, self[i]);
                    add_tensor(job.loop, end[i]);
                    *slot = weight.toDouble();
                    add_operand(job.loop, slot, kernels::DType::kFloat64, 0);
                });
}

// self[i] += value(i) * t1[i] (*|/) t2[i]
template <typename ValueOf>
void addc_(TernaryOp op, const char* name, at::TensorList self, at::TensorList t1, at::TensorList t2,
           ValueOf value_of) {
    queue_batch(self, name, Job::Kind::kTernary, static_cast<int8_t>(op), [&](size_t i, Job& job, double*) {
        add_tensor(job.loop, self[i]);
        add_tensor(job.loop, t1[i]);
        add_tensor(job.loop, t2[i]);
        job.value = to_kernel_scalar(value_of(i));
    });
}

void addcmul_scalar_(at::TensorList self, at::TensorList t1, at::TensorList t2, const at::Scalar& value) {
    if (!flat_ok({self, t1, t2}) || value.isComplex())
        return at::native::foreach_tensor_addcmul_scalar_slow_(self, t1, t2, value);
    addc_(TernaryOp::kAddcmul, "_foreach_addcmul_", self, t1, t2, [&](size_t) { return value; });
}

void addcdiv_scalar_(at::TensorList self, at::TensorList t1, at::TensorList t2, const at::Scalar& value) {
    if (!flat_ok({self, t1, t2}) || value.isComplex())
        return at::native::foreach_tensor_addcdiv_scalar_slow_(self, t1, t2, value);
    addc_(TernaryOp::kAddcdiv, "_foreach_addcdiv_", self, t1, t2, [&](size_t) { return value; });
}

void addcdiv_scalarlist_(at::TensorList self, at::TensorList t1, at::TensorList t2,
                         at::ArrayRef<at::Scalar> scalars) {
    bool ok = flat_ok({self, t1, t2}) && scalars.size() == self.size();
    for (const auto& s : scalars) ok = ok && !s.isComplex();
    if (!ok) return at::native::foreach_tensor_addcdiv_scalarlist_slow_(self, t1, t2, scalars);
    addc_(TernaryOp::kAddcdiv, "_foreach_addcdiv_", self, t1, t2, [&](size_t i) { return scalars[i]; });
}

// ---- fused Adam / AdamW (fused=True) ------------------------------------------------------------

// Contiguous state of one dtype (float32, bfloat16 or float16) on one ember device, the step
// counts and any AMP scalars (grad_scale, found_inf) as float device scalars: anything else takes
// PyTorch's CPU kernel through the fallback.
bool native_adam(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                 at::TensorList max_exp_avg_sqs, at::TensorList steps, bool amsgrad,
                 const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
    if (params.empty()) return false;
    for (const auto* amp : {&grad_scale, &found_inf}) {
        if (!*amp || !(*amp)->defined()) continue;
        const at::Tensor& t = **amp;
        if (t.device() != params[0].device() || t.scalar_type() != at::kFloat || t.numel() != 1) return false;
    }
    const size_t n = params.size();
    if (grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n || steps.size() != n ||
        (amsgrad && max_exp_avg_sqs.size() != n)) {
        return false;
    }
    const c10::Device device = params[0].device();
    if (!params[0].is_privateuseone()) return false;
    const at::ScalarType dtype = params[0].scalar_type();
    if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) return false;
    auto ok = [&](const at::Tensor& t, const at::Tensor& like) {
        return t.defined() && t.device() == device && t.scalar_type() == dtype && t.is_contiguous() &&
               t.numel() == like.numel();
    };
    for (size_t i = 0; i < n; ++i) {
        const at::Tensor& p = params[i];
        if (!ok(p, p) || !ok(grads[i], p) || !ok(exp_avgs[i], p) || !ok(exp_avg_sqs[i], p)) return false;
        if (amsgrad && !ok(max_exp_avg_sqs[i], p)) return false;
        const at::Tensor& s = steps[i];
        if (!s.defined() || s.device() != device || s.scalar_type() != at::kFloat || s.numel() != 1) return false;
    }
    return true;
}

const float* amp_scalar(const std::optional<at::Tensor>& t) {
    return t && t->defined() ? t->const_data_ptr<float>() : nullptr;
}

void queue_adam(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                at::TensorList max_exp_avg_sqs, at::TensorList steps, kernels::AdamArgs base, const char* name) {
    struct Update {
        kernels::TensorView p, g, m, v, vmax;
        kernels::AdamArgs args;
    };
    auto updates = std::make_shared<std::vector<Update>>();
    for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].numel() == 0) continue;
        Update u{view_of(params[i]), view_in(grads[i]), view_of(exp_avgs[i]), view_of(exp_avg_sqs[i]), {}, base};
        if (base.amsgrad) u.vmax = view_of(max_exp_avg_sqs[i]);
        u.args.step = static_cast<const float*>(steps[i].const_data_ptr());
        updates->push_back(u);
    }
    if (updates->empty()) return;
    queue(params[0], name, [updates](runtime::ThreadPool* pool) {
        const auto& us = *updates;
        return pool->for_each_item(static_cast<int64_t>(us.size()), [&](int64_t i, runtime::ThreadPool* p) {
            const Update& u = us[static_cast<size_t>(i)];
            return kernels::adam_step(u.p, u.g, u.m, u.v, u.vmax, u.args, p);
        });
    });
}

kernels::AdamArgs adam_args(double lr, double beta1, double beta2, double weight_decay, double eps, bool amsgrad,
                            bool maximize, bool decoupled) {
    kernels::AdamArgs a;
    a.lr = lr;
    a.beta1 = beta1;
    a.beta2 = beta2;
    a.weight_decay = weight_decay;
    a.eps = eps;
    a.amsgrad = amsgrad;
    a.maximize = maximize;
    a.decoupled = decoupled;
    return a;
}

#define EMBER_FUSED_ADAM(fn, op, decoupled)                                                                      \
    void fn(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,       \
            at::TensorList max_exp_avg_sqs, at::TensorList steps, double lr, double beta1, double beta2,          \
            double weight_decay, double eps, bool amsgrad, bool maximize,                                         \
            const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {           \
        if (!native_adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, amsgrad, grad_scale,        \
                         found_inf)) {                                                                            \
            return cpu<ATEN_OP(op)>(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, beta1, beta2, \
                                    weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);                 \
        }                                                                                                         \
        kernels::AdamArgs args = adam_args(lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled);     \
        args.grad_scale = amp_scalar(grad_scale);                                                                 \
        args.found_inf = amp_scalar(found_inf);                                                                   \
        queue_adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, args, #op);                        \
    }
EMBER_FUSED_ADAM(fused_adamw_, _fused_adamw_, true)
EMBER_FUSED_ADAM(fused_adam_, _fused_adam_, false)
#undef EMBER_FUSED_ADAM

// The tensor-lr form (Adam(fused=True, lr=torch.tensor(...)), the graph-capture recipe for an lr
// schedule kept on the device): an ember float32 scalar is read by the kernel when it runs, so a
// captured step follows later changes to it; a CPU lr is a number now, as CUDA's kernel takes it.
#define EMBER_FUSED_ADAM_TENSOR_LR(fn, op, plain, decoupled)                                                      \
    void fn(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,       \
            at::TensorList max_exp_avg_sqs, at::TensorList steps, const at::Tensor& lr, double beta1,             \
            double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,                           \
            const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {           \
        if (lr.is_cpu()) {                                                                                        \
            return plain(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr.item<double>(), beta1,   \
                         beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);                     \
        }                                                                                                         \
        const bool native_lr = !self.empty() && lr.device() == self[0].device() &&                                \
                               lr.scalar_type() == at::kFloat && lr.numel() == 1;                                 \
        if (!native_lr || !native_adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, amsgrad,      \
                                       grad_scale, found_inf)) {                                                  \
            return cpu<ATEN_OP2(op, tensor_lr)>(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr,   \
                                                beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale,   \
                                                found_inf);                                                       \
        }                                                                                                         \
        kernels::AdamArgs args = adam_args(0.0, beta1, beta2, weight_decay, eps, amsgrad, maximize, decoupled);    \
        args.lr_ptr = lr.const_data_ptr<float>();                                                                 \
        args.grad_scale = amp_scalar(grad_scale);                                                                 \
        args.found_inf = amp_scalar(found_inf);                                                                   \
        queue_adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, args, #op);                        \
    }
EMBER_FUSED_ADAM_TENSOR_LR(fused_adamw_tensor_lr_, _fused_adamw_, fused_adamw_, true)
EMBER_FUSED_ADAM_TENSOR_LR(fused_adam_tensor_lr_, _fused_adam_, fused_adam_, false)
#undef EMBER_FUSED_ADAM_TENSOR_LR

// ---- AMP loss scaling (torch.amp.GradScaler) ---------------------------------------------------

// The argument checks of PyTorch's CUDA kernels, with their messages.
void check_amp_scalar(const at::Tensor& t, const char* what, const at::Tensor& like) {
    TORCH_CHECK(t.numel() == 1, what, " must be a 1-element tensor.");
    TORCH_CHECK(t.scalar_type() == at::kFloat, what, " must be a float tensor.");
    TORCH_CHECK(t.device() == like.device(), what, " must be on the same device as the other tensors (",
                like.device(), "), got ", t.device());
}

void amp_unscale_(at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
    if (grads.empty()) return;
    check_amp_scalar(inv_scale, "inv_scale", found_inf);
    check_amp_scalar(found_inf, "found_inf", found_inf);
    bool flat = found_inf.is_privateuseone();
    for (const at::Tensor& g : grads) {
        TORCH_CHECK(g.layout() == c10::kStrided, "one of scaled_grads was not a strided tensor.");
        TORCH_CHECK(at::isFloatingType(g.scalar_type()), "_amp_foreach_non_finite_check_and_unscale_: ",
                    "gradients must be floating point, got ", g.scalar_type());
        flat = flat && g.device() == found_inf.device() && g.is_contiguous();
    }
    if (!flat) return cpu<ATEN_OP(_amp_foreach_non_finite_check_and_unscale_)>(grads, found_inf, inv_scale);
    struct Job {
        std::vector<kernels::TensorView> grads;
        float* found_inf;
        const float* inv_scale;
    };
    auto job = std::make_shared<Job>();
    for (const at::Tensor& g : grads)
        if (g.numel() > 0) job->grads.push_back(view_of(g));
    job->found_inf = found_inf.data_ptr<float>();
    job->inv_scale = inv_scale.const_data_ptr<float>();
    queue(found_inf, "_amp_foreach_non_finite_check_and_unscale_", [job](runtime::ThreadPool* pool) {
        const float inv = *job->inv_scale;
        std::vector<char> bad(job->grads.size(), 0);
        Status st = pool->for_each_item(static_cast<int64_t>(bad.size()), [&](int64_t i, runtime::ThreadPool* p) {
            StatusOr<bool> r = kernels::unscale_check_finite(job->grads[static_cast<size_t>(i)], inv, p);
            if (!r.ok()) return r.status();
            bad[static_cast<size_t>(i)] = *r;
            return Status();
        });
        for (char b : bad)
            if (b) *job->found_inf = 1.f;
        return st;
    });
}

at::Tensor& amp_update_scale_(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                              double growth_factor, double backoff_factor, int64_t growth_interval) {
    check_amp_scalar(self, "current_scale", self);
    check_amp_scalar(found_inf, "found_inf", self);
    TORCH_CHECK(growth_tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
    TORCH_CHECK(growth_tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
    TORCH_CHECK(growth_tracker.device() == self.device(), "growth_tracker must be on the same device as ",
                "current_scale (", self.device(), "), got ", growth_tracker.device());
    float* scale = self.data_ptr<float>();
    int32_t* tracker = growth_tracker.data_ptr<int32_t>();
    const float* inf = found_inf.const_data_ptr<float>();
    queue(self, "_amp_update_scale_", [=](runtime::ThreadPool*) {
        kernels::update_scale(scale, tracker, inf, growth_factor, backoff_factor, growth_interval);
        return Status();
    });
    return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_amp_foreach_non_finite_check_and_unscale_", amp_unscale_);
    m.impl("_amp_update_scale_", amp_update_scale_);
    m.impl("_fused_adamw_", fused_adamw_);
    m.impl("_fused_adam_", fused_adam_);
    m.impl("_fused_adamw_.tensor_lr", fused_adamw_tensor_lr_);
    m.impl("_fused_adam_.tensor_lr", fused_adam_tensor_lr_);
    m.impl("_foreach_add_.Scalar", add_scalar_);
    m.impl("_foreach_add_.List", add_list_);
    m.impl("_foreach_mul_.Scalar", mul_scalar_);
    m.impl("_foreach_mul_.Tensor", mul_tensor_);
    m.impl("_foreach_div_.ScalarList", div_scalarlist_);
    m.impl("_foreach_sqrt", sqrt);
    m.impl("_foreach_sqrt_", sqrt_);
    m.impl("_foreach_lerp_.Scalar", lerp_scalar_);
    m.impl("_foreach_addcmul_.Scalar", addcmul_scalar_);
    m.impl("_foreach_addcdiv_.Scalar", addcdiv_scalar_);
    m.impl("_foreach_addcdiv_.ScalarList", addcdiv_scalarlist_);
}

}  // namespace ember::torch_glue
