#include "kernels/loss/ctc.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace ember::kernels {
namespace {

// log(exp(a) + exp(b) + exp(c)), shifted by the largest term (by 0 when all are -inf, which
// keeps -inf - -inf out).
template <typename T>
T log_add3(T a, T b, T c) {
    T m = std::max(a, std::max(b, c));
    if (m == -std::numeric_limits<T>::infinity()) m = 0;
    return std::log(std::exp(a - m) + std::exp(b - m) + std::exp(c - m)) + m;
}

// The extended target of one sample: blank at even states, the labels at odd ones.
template <typename L>
Status extended_labels(std::vector<int64_t>& ext, const TensorView& targets, const CtcBatch& batch, int64_t b,
                       int64_t classes) {
    const int64_t tl = batch.target_lengths[static_cast<size_t>(b)];
    const L* labels = static_cast<const L*>(targets.data) + batch.target_offsets[static_cast<size_t>(b)];
    ext.assign(static_cast<size_t>(2 * tl + 1), batch.blank);
    for (int64_t k = 0; k < tl; ++k) {
        const int64_t label = static_cast<int64_t>(labels[k * batch.target_stride]);
        if (label < 0 || label >= classes)
            return invalid_argument("ctc_loss: target label " + std::to_string(label) + " of sample " +
                                    std::to_string(b) + " is out of range for " + std::to_string(classes) +
                                    " classes");
        ext[static_cast<size_t>(2 * k + 1)] = label;
    }
    return Status();
}

// Element (t, b, c) of log_probs.
template <typename T>
struct Frames {
    const T* data;
    int64_t st, sb, sc;
    T at(int64_t t, int64_t b, int64_t c) const { return data[t * st + b * sb + c * sc]; }
};

template <typename T>
Frames<T> frames_of(const TensorView& v) {
    return {static_cast<const T*>(v.data), v.strides[0], v.strides[1], v.strides[2]};
}

template <typename T, typename L>
Status forward_sample(int64_t b, T* nll, T* alpha, const Frames<T>& lp, const TensorView& targets,
                      const CtcBatch& batch, int64_t frames, int64_t states, int64_t classes) {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    T* la = alpha + b * frames * states;
    std::fill(la, la + frames * states, kNegInf);
    const int64_t il = batch.input_lengths[static_cast<size_t>(b)], tl = batch.target_lengths[static_cast<size_t>(b)];
    if (il == 0) {
        nll[b] = tl == 0 ? T(-0.0) : std::numeric_limits<T>::infinity();
        return Status();
    }
    std::vector<int64_t> ext;
    if (Status st = extended_labels<L>(ext, targets, batch, b, classes); !st.ok()) return st;
    const int64_t n = 2 * tl + 1;
    la[0] = lp.at(0, b, batch.blank);
    if (tl > 0) la[1] = lp.at(0, b, ext[1]);
    for (int64_t t = 1; t < il; ++t) {
        const T* prev = la + (t - 1) * states;
        T* cur = la + t * states;
        for (int64_t s = 0; s < n; ++s) {
            const T a2 = s > 0 ? prev[s - 1] : kNegInf;
            const T a3 = s > 1 && ext[static_cast<size_t>(s - 2)] != ext[static_cast<size_t>(s)] ? prev[s - 2] : kNegInf;
            cur[s] = log_add3(prev[s], a2, a3) + lp.at(t, b, ext[static_cast<size_t>(s)]);
        }
    }
    const T* last = la + (il - 1) * states;
    const T l1 = last[2 * tl], l2 = tl > 0 ? last[2 * tl - 1] : kNegInf;
    nll[b] = -log_add3(l1, l2, kNegInf);
    return Status();
}

// One sample's gradient rows grad[t, b, :]: first the log of the summed alpha * beta of the
// states that emit each class (beta kept for two frames), then the gradient from it.
template <typename T, typename L>
Status backward_sample(int64_t b, T* grad, const TensorView& grad_nll, const Frames<T>& lp, const TensorView& targets,
                       const T* nll_data, int64_t nll_stride, const T* alpha, const CtcBatch& batch, bool zero_infinity,
                       int64_t frames, int64_t nb, int64_t states, int64_t classes) {
    constexpr T kNegInf = -std::numeric_limits<T>::infinity();
    auto row = [&](int64_t t) { return grad + (t * nb + b) * classes; };
    const int64_t il = batch.input_lengths[static_cast<size_t>(b)], tl = batch.target_lengths[static_cast<size_t>(b)];
    const T nll = nll_data[b * nll_stride];
    for (int64_t t = il; t < frames; ++t) std::fill(row(t), row(t) + classes, T(0));
    if (il == 0) return Status();
    if (zero_infinity && nll == std::numeric_limits<T>::infinity()) {
        for (int64_t t = 0; t < il; ++t) std::fill(row(t), row(t) + classes, T(0));
        return Status();
    }
    std::vector<int64_t> ext;
    if (Status st = extended_labels<L>(ext, targets, batch, b, classes); !st.ok()) return st;
    const int64_t n = 2 * tl + 1;
    const T* la = alpha + b * frames * states;
    for (int64_t t = 0; t < il; ++t) std::fill(row(t), row(t) + classes, kNegInf);
    std::vector<T> beta_next(static_cast<size_t>(n), kNegInf), beta(static_cast<size_t>(n), kNegInf);
    {
        const int64_t t = il - 1;
        T* g = row(t);
        beta_next[static_cast<size_t>(2 * tl)] = lp.at(t, b, batch.blank);
        g[batch.blank] = la[t * states + 2 * tl] + beta_next[static_cast<size_t>(2 * tl)];
        if (tl > 0) {
            const int64_t label = ext[static_cast<size_t>(2 * tl - 1)];
            beta_next[static_cast<size_t>(2 * tl - 1)] = lp.at(t, b, label);
            // A blank and a label: two distinct classes unless a label equals the blank, where the
            // CPU's kernel also assigns rather than adds.
            g[label] = la[t * states + 2 * tl - 1] + beta_next[static_cast<size_t>(2 * tl - 1)];
        }
    }
    for (int64_t t = il - 2; t >= 0; --t) {
        T* g = row(t);
        for (int64_t s = n - 1; s >= 0; --s) {
            const int64_t label = ext[static_cast<size_t>(s)];
            const T b2 = s < 2 * tl ? beta_next[static_cast<size_t>(s + 1)] : kNegInf;
            const T b3 = s < 2 * tl - 1 && ext[static_cast<size_t>(s + 2)] != label ? beta_next[static_cast<size_t>(s + 2)]
                                                                                     : kNegInf;
            const T lb = log_add3(beta_next[static_cast<size_t>(s)], b2, b3) + lp.at(t, b, label);
            beta[static_cast<size_t>(s)] = lb;
            const T ab = la[t * states + s] + lb;
            T& acc = g[label];
            if (acc == kNegInf) {
                acc = ab;
            } else {
                const T m = std::max(acc, ab);
                acc = std::log(std::exp(acc - m) + std::exp(ab - m)) + m;
            }
        }
        std::swap(beta, beta_next);
    }
    const T gr = static_cast<const T*>(grad_nll.data)[b * grad_nll.strides[0]];
    for (int64_t t = 0; t < il; ++t) {
        T* g = row(t);
        for (int64_t c = 0; c < classes; ++c) {
            const T x = lp.at(t, b, c);
            g[c] = (std::exp(x) - std::exp(g[c] + nll - x)) * gr;
        }
    }
    return Status();
}

Status check(const TensorView& log_probs, const TensorView& targets, const CtcBatch& batch) {
    if (log_probs.ndim != 3) return invalid_argument("ctc_loss: log_probs must be [frames, batch, classes]");
    if (log_probs.dtype != DType::kFloat32 && log_probs.dtype != DType::kFloat64)
        return invalid_argument("ctc_loss: log_probs must be float32 or float64");
    if (targets.dtype != DType::kInt32 && targets.dtype != DType::kInt64)
        return invalid_argument("ctc_loss: targets must be int32 or int64");
    const size_t nb = static_cast<size_t>(log_probs.sizes[1]);
    if (batch.input_lengths.size() != nb || batch.target_lengths.size() != nb || batch.target_offsets.size() != nb)
        return invalid_argument("ctc_loss: one input length, target length and target offset per sample expected");
    if (batch.blank < 0 || batch.blank >= log_probs.sizes[2]) return invalid_argument("ctc_loss: blank must be in label range");
    return Status();
}

template <typename F>
Status per_sample(int64_t n, runtime::ThreadPool* pool, F&& fn) {
    if (!pool) {
        for (int64_t b = 0; b < n; ++b)
            if (Status st = fn(b); !st.ok()) return st;
        return Status();
    }
    return pool->for_each_item(n, [&](int64_t b, runtime::ThreadPool*) { return fn(b); });
}

template <typename T, typename L>
Status forward_typed(const TensorView& nll, const TensorView& log_alpha, const TensorView& log_probs,
                     const TensorView& targets, const CtcBatch& batch, runtime::ThreadPool* pool) {
    const Frames<T> lp = frames_of<T>(log_probs);
    const int64_t frames = log_probs.sizes[0], classes = log_probs.sizes[2], states = log_alpha.sizes[2];
    T* out = static_cast<T*>(nll.data);
    T* alpha = static_cast<T*>(log_alpha.data);
    return per_sample(log_probs.sizes[1], pool, [&](int64_t b) {
        return forward_sample<T, L>(b, out, alpha, lp, targets, batch, frames, states, classes);
    });
}

template <typename T, typename L>
Status backward_typed(const TensorView& grad, const TensorView& grad_nll, const TensorView& log_probs,
                      const TensorView& targets, const TensorView& nll, const TensorView& log_alpha,
                      const CtcBatch& batch, bool zero_infinity, runtime::ThreadPool* pool) {
    const Frames<T> lp = frames_of<T>(log_probs);
    const int64_t frames = log_probs.sizes[0], nb = log_probs.sizes[1], classes = log_probs.sizes[2];
    const int64_t states = log_alpha.sizes[2];
    T* g = static_cast<T*>(grad.data);
    const T* nll_data = static_cast<const T*>(nll.data);
    const T* alpha = static_cast<const T*>(log_alpha.data);
    return per_sample(nb, pool, [&](int64_t b) {
        return backward_sample<T, L>(b, g, grad_nll, lp, targets, nll_data, nll.strides[0], alpha, batch, zero_infinity,
                                     frames, nb, states, classes);
    });
}

// Calls F<T, L> for the (log_probs, targets) dtype pair.
#define EMBER_CTC_DISPATCH(fn, lp_dtype, label_dtype, ...)                                        \
    ((lp_dtype) == DType::kFloat32                                                                 \
         ? ((label_dtype) == DType::kInt32 ? fn<float, int32_t>(__VA_ARGS__) : fn<float, int64_t>(__VA_ARGS__)) \
         : ((label_dtype) == DType::kInt32 ? fn<double, int32_t>(__VA_ARGS__) : fn<double, int64_t>(__VA_ARGS__)))

}  // namespace

Status ctc_loss_forward(const TensorView& nll, const TensorView& log_alpha, const TensorView& log_probs,
                        const TensorView& targets, const CtcBatch& batch, runtime::ThreadPool* pool) {
    if (Status st = check(log_probs, targets, batch); !st.ok()) return st;
    if (nll.dtype != log_probs.dtype || log_alpha.dtype != log_probs.dtype || !log_alpha.is_contiguous() ||
        log_alpha.ndim != 3 || log_alpha.sizes[0] != log_probs.sizes[1] || log_alpha.sizes[1] != log_probs.sizes[0])
        return invalid_argument("ctc_loss: nll and log_alpha must be [batch] and contiguous [batch, frames, states] "
                                "of log_probs' dtype");
    for (int64_t tl : batch.target_lengths)
        if (2 * tl + 1 > log_alpha.sizes[2]) return invalid_argument("ctc_loss: log_alpha has too few states");
    return EMBER_CTC_DISPATCH(forward_typed, log_probs.dtype, targets.dtype, nll, log_alpha, log_probs, targets, batch,
                              pool);
}

Status ctc_loss_backward(const TensorView& grad_log_probs, const TensorView& grad_nll, const TensorView& log_probs,
                         const TensorView& targets, const TensorView& nll, const TensorView& log_alpha,
                         const CtcBatch& batch, bool zero_infinity, runtime::ThreadPool* pool) {
    if (Status st = check(log_probs, targets, batch); !st.ok()) return st;
    const DType t = log_probs.dtype;
    if (grad_log_probs.dtype != t || grad_nll.dtype != t || nll.dtype != t || log_alpha.dtype != t ||
        !grad_log_probs.is_contiguous() || !log_alpha.is_contiguous() || log_alpha.ndim != 3 ||
        log_alpha.sizes[0] != log_probs.sizes[1] || log_alpha.sizes[1] != log_probs.sizes[0])
        return invalid_argument("ctc_loss backward: tensors must share log_probs' dtype; the gradient and log_alpha "
                                "must be contiguous");
    for (int64_t tl : batch.target_lengths)
        if (2 * tl + 1 > log_alpha.sizes[2]) return invalid_argument("ctc_loss backward: log_alpha has too few states");
    return EMBER_CTC_DISPATCH(backward_typed, t, targets.dtype, grad_log_probs, grad_nll, log_probs, targets, nll,
                              log_alpha, batch, zero_infinity, pool);
}

#undef EMBER_CTC_DISPATCH

}  // namespace ember::kernels
