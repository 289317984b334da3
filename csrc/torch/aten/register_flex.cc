// FlexAttention's fused kernels (kernels/attention/flex.h) as the ops ember::flex_attention and
// ember::flex_attention_backward, which the flex_attention higher-order op's ember kernel
// (python/torch_ember/flex/hop.py) calls with its score_mod, mask_mod and score_mod gradient
// compiled to programs (python/torch_ember/flex/program.py). A program travels as
// (int[] code, float[] constants, Tensor[] buffers): code starts with the register count and the
// result register, then eight ints per instruction (op, dst, a, b, c, d, e, round_f32). The
// gradient program also scatters into the gradients of captured tensors (grad_targets give their
// shapes): six ints per scatter (target, four index registers, value register).
//
// Inputs are computed in float32 (the dense reference's working precision for float16, bfloat16
// and float32); outputs are float32, contiguous; the caller casts and restrides them.
#include <torch/library.h>

#include <memory>

#include "../check.h"
#include "kernels/attention/flex.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

namespace flex = kernels::flex;

std::shared_ptr<flex::Program> program(c10::IntArrayRef code, c10::ArrayRef<double> constants,
                                       const std::vector<at::Tensor>& buffers, const char* what) {
    auto p = std::make_shared<flex::Program>();
    if (code.empty()) return p;
    TORCH_CHECK(code.size() >= 2 && (code.size() - 2) % 8 == 0, "ember flex_attention: malformed ", what, " program");
    p->num_regs = static_cast<int32_t>(code[0]);
    p->result = static_cast<int32_t>(code[1]);
    for (size_t i = 2; i < code.size(); i += 8) {
        flex::Instr in;
        in.op = static_cast<flex::Op>(code[i]);
        in.dst = static_cast<int32_t>(code[i + 1]);
        in.a = static_cast<int32_t>(code[i + 2]);
        in.b = static_cast<int32_t>(code[i + 3]);
        in.c = static_cast<int32_t>(code[i + 4]);
        in.d = static_cast<int32_t>(code[i + 5]);
        in.e = static_cast<int32_t>(code[i + 6]);
        in.round_f32 = code[i + 7] != 0;
        p->code.push_back(in);
    }
    p->constants.assign(constants.begin(), constants.end());
    for (const at::Tensor& t : buffers) {
        TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
                    "ember flex_attention: a tensor the ", what, " reads is on ", t.device(), ", not ember");
        p->buffers.push_back(view_in(t));
    }
    EMBER_CHECK(flex::validate(*p, what));
    return p;
}

at::Tensor f32(const at::Tensor& t) { return t.to(at::kFloat).contiguous(); }
at::Tensor i32(const at::Tensor& t) { return t.to(at::kInt); }

flex::BlockMask block_mask(const at::Tensor& num, const at::Tensor& idx, const std::optional<at::Tensor>& full_num,
                           const std::optional<at::Tensor>& full_idx, int64_t q_block, int64_t kv_block) {
    flex::BlockMask m;
    m.kv_num_blocks = view_in(i32(num));
    m.kv_indices = view_in(i32(idx));
    if (full_num.has_value() && full_num->defined() && full_idx.has_value() && full_idx->defined()) {
        m.full_num_blocks = view_in(i32(*full_num));
        m.full_indices = view_in(i32(*full_idx));
    }
    m.q_block = q_block;
    m.kv_block = kv_block;
    return m;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flex_forward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& kv_num_blocks,
    const at::Tensor& kv_indices, const std::optional<at::Tensor>& full_kv_num_blocks,
    const std::optional<at::Tensor>& full_kv_indices, int64_t q_block, int64_t kv_block, double scale,
    c10::IntArrayRef score_code, c10::ArrayRef<double> score_consts, at::TensorList score_buffers,
    c10::IntArrayRef mask_code, c10::ArrayRef<double> mask_consts, at::TensorList mask_buffers) {
    TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "ember flex_attention: q, k, v must be 4-d");
    auto score = program(score_code, score_consts, score_buffers.vec(), "score_mod");
    auto mask = program(mask_code, mask_consts, mask_buffers.vec(), "mask_mod");
    at::Tensor qf = f32(q), kf = f32(k), vf = f32(v);
    const auto opts = q.options().dtype(at::kFloat);
    at::Tensor out = at::empty({q.size(0), q.size(1), q.size(2), v.size(3)}, opts);
    at::Tensor lse = at::empty({q.size(0), q.size(1), q.size(2)}, opts), mx = at::empty_like(lse);
    flex::ForwardArgs a;
    a.p.q = view_in(qf), a.p.k = view_in(kf), a.p.v = view_in(vf);
    a.p.mask = block_mask(kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, q_block, kv_block);
    a.p.scale = scale;
    a.out = view_of(out), a.lse = view_of(lse), a.max = view_of(mx);
    if (out.numel() > 0 || lse.numel() > 0) {
        // The programs live as long as the task; the tensors' memory is not reused before it runs
        // (allocation is stream-ordered).
        queue(q, "flex_attention", [a, score, mask](runtime::ThreadPool* pool) {
            flex::ForwardArgs args = a;
            args.p.score_mod = score.get();
            args.p.mask_mod = mask.get();
            return flex::forward(args, pool);
        });
    }
    return {out, lse, mx};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, std::vector<at::Tensor>> flex_backward(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_lse, const at::Tensor& kv_num_blocks,
    const at::Tensor& kv_indices, const std::optional<at::Tensor>& full_kv_num_blocks,
    const std::optional<at::Tensor>& full_kv_indices, int64_t q_block, int64_t kv_block, double scale,
    c10::IntArrayRef score_code, c10::ArrayRef<double> score_consts, at::TensorList score_buffers,
    c10::IntArrayRef mask_code, c10::ArrayRef<double> mask_consts, at::TensorList mask_buffers,
    c10::IntArrayRef grad_code, c10::ArrayRef<double> grad_consts, at::TensorList grad_buffers,
    c10::IntArrayRef grad_scatter, at::TensorList grad_targets) {
    auto score = program(score_code, score_consts, score_buffers.vec(), "score_mod");
    auto mask = program(mask_code, mask_consts, mask_buffers.vec(), "mask_mod");
    auto grad = program(grad_code, grad_consts, grad_buffers.vec(), "score_mod gradient");
    // Gradients of captured tensors: float32, contiguous, in the order of grad_targets.
    std::vector<at::Tensor> buffer_grads;
    TORCH_CHECK(grad_scatter.size() % 6 == 0, "ember flex_attention: malformed scatter list");
    for (const at::Tensor& t : grad_targets) {
        buffer_grads.push_back(at::empty(t.sizes(), t.options().dtype(at::kFloat)));
        grad->grads.push_back(view_of(buffer_grads.back()));
    }
    for (size_t i = 0; i < grad_scatter.size(); i += 6) {
        flex::Scatter sc;
        sc.grad = static_cast<int32_t>(grad_scatter[i]);
        for (int k = 0; k < 4; ++k) sc.idx[k] = static_cast<int32_t>(grad_scatter[i + 1 + k]);
        sc.value = static_cast<int32_t>(grad_scatter[i + 5]);
        grad->scatters.push_back(sc);
    }
    EMBER_CHECK(flex::validate(*grad, "score_mod gradient"));
    at::Tensor qf = f32(q), kf = f32(k), vf = f32(v), of = f32(out), lf = f32(lse), gof = f32(grad_out);
    at::Tensor glf = grad_lse.has_value() && grad_lse->defined() ? f32(*grad_lse) : at::Tensor();
    const auto opts = q.options().dtype(at::kFloat);
    at::Tensor dq = at::empty(qf.sizes(), opts), dk = at::empty(kf.sizes(), opts), dv = at::empty(vf.sizes(), opts);
    flex::BackwardArgs a;
    a.p.q = view_in(qf), a.p.k = view_in(kf), a.p.v = view_in(vf);
    a.p.mask = block_mask(kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices, q_block, kv_block);
    a.p.scale = scale;
    a.out = view_in(of), a.lse = view_in(lf), a.grad_out = view_in(gof);
    if (glf.defined()) a.grad_lse = view_in(glf);
    a.dq = view_of(dq), a.dk = view_of(dk), a.dv = view_of(dv);
    queue(q, "flex_attention_backward", [a, score, mask, grad](runtime::ThreadPool* pool) {
        flex::BackwardArgs args = a;
        args.p.score_mod = score.get();
        args.p.mask_mod = mask.get();
        args.score_grad = grad.get();
        return flex::backward(args, pool);
    });
    return {dq, dk, dv, buffer_grads};
}

}  // namespace

TORCH_LIBRARY(ember, m) {
    m.def("flex_attention(Tensor q, Tensor k, Tensor v, Tensor kv_num_blocks, Tensor kv_indices, "
          "Tensor? full_kv_num_blocks, Tensor? full_kv_indices, int q_block, int kv_block, float scale, "
          "int[] score_code, float[] score_consts, Tensor[] score_buffers, int[] mask_code, float[] mask_consts, "
          "Tensor[] mask_buffers) -> (Tensor, Tensor, Tensor)");
    m.def("flex_attention_backward(Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor grad_out, "
          "Tensor? grad_lse, Tensor kv_num_blocks, Tensor kv_indices, Tensor? full_kv_num_blocks, "
          "Tensor? full_kv_indices, int q_block, int kv_block, float scale, int[] score_code, "
          "float[] score_consts, Tensor[] score_buffers, int[] mask_code, float[] mask_consts, "
          "Tensor[] mask_buffers, int[] grad_code, float[] grad_consts, Tensor[] grad_buffers, "
          "int[] grad_scatter, Tensor[] grad_targets) -> (Tensor, Tensor, Tensor, Tensor[])");
}

TORCH_LIBRARY_IMPL(ember, PrivateUse1, m) {
    m.impl("flex_attention", flex_forward);
    m.impl("flex_attention_backward", flex_backward);
}

}  // namespace ember::torch_glue
