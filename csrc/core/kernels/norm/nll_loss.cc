#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/norm/norm.h"
#include "kernels/norm/row_io.h"

namespace ember::kernels {
namespace {

using namespace detail::norm;

constexpr int64_t kNone = 0, kMean = 1, kSum = 2;

// Fixed-size row blocks: the loss is summed per block and the blocks in order, so the result
// does not depend on how many threads the pool has.
constexpr int64_t kBlockRows = 4096;

// Checked before anything is written, so a bad target leaves the outputs untouched; the first
// offending row is the one reported, as PyTorch's serial check would.
Status check_targets(const char* op, const TensorView& target, int64_t rows, int64_t classes,
                     int64_t ignore_index) {
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t t = load<int64_t>(target, r);
        if (t != ignore_index && (t < 0 || t >= classes))
            return invalid_argument(std::string(op) + ": Target " + std::to_string(t) + " is out of bounds.");
    }
    return Status();
}

Status check_args(const char* op, const TensorView& logp, const TensorView& target,
                  const TensorView& weight, int64_t reduction) {
    if (logp.ndim != 2) return invalid_argument(std::string(op) + ": input must be 2-d [rows, classes]");
    const int64_t rows = logp.sizes[0], classes = logp.sizes[1];
    if (reduction != kNone && reduction != kMean && reduction != kSum)
        return invalid_argument(std::string(op) + ": unknown reduction " + std::to_string(reduction));
    EMBER_RETURN_IF_ERROR(check_matrix(op, "input", logp, rows, classes));
    EMBER_RETURN_IF_ERROR(check_vector(op, "target", target, rows, /*floating=*/false));
    if (weight.data != nullptr) EMBER_RETURN_IF_ERROR(check_vector(op, "weight", weight, classes));
    return Status();
}

struct Partial {
    double loss = 0;
    double weight = 0;
};

template <typename C>
void run_forward(const TensorView& out, const TensorView& total_weight, const TensorView& logp,
                 const TensorView& target, const TensorView& weight, int64_t reduction,
                 int64_t ignore_index, runtime::ThreadPool* pool) {
    const int64_t rows = logp.sizes[0], classes = logp.sizes[1];
    const std::vector<C> w = load_vector<C>(weight, classes, C(1));
    const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
    std::vector<Partial> part(static_cast<size_t>(blocks));
    auto run = [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
            Partial p;
            for (int64_t r = k * kBlockRows; r < std::min(rows, (k + 1) * kBlockRows); ++r) {
                const int64_t t = load<int64_t>(target, r);
                if (t == ignore_index) {
                    if (reduction == kNone) store(out, r, C(0));
                    continue;
                }
                const C loss = -load_at<C>(logp, r, t) * w[t];
                if (reduction == kNone) store(out, r, loss);
                p.loss += loss;
                p.weight += w[t];
            }
            part[k] = p;
        }
    };
    if (pool == nullptr || blocks <= 1) run(0, blocks);
    else pool->parallel_for(blocks, 1, run);

    // PyTorch leaves total_weight at 0 for reduction none.
    Partial sum;
    if (reduction != kNone) {
        for (const Partial& p : part) {
            sum.loss += p.loss;
            sum.weight += p.weight;
        }
        // With every row ignored this is 0 / 0 = NaN, as in PyTorch.
        store(out, 0, reduction == kMean ? sum.loss / sum.weight : sum.loss);
    }
    if (total_weight.data != nullptr) store(total_weight, 0, sum.weight);
}

template <typename C>
void run_backward(const TensorView& grad_logp, const TensorView& grad_out, const TensorView& target,
                  const TensorView& weight, const TensorView& total_weight, int64_t reduction,
                  int64_t ignore_index, runtime::ThreadPool* pool) {
    const int64_t rows = grad_logp.sizes[0], classes = grad_logp.sizes[1];
    const std::vector<C> w = load_vector<C>(weight, classes, C(1));
    C g = 0;
    if (reduction != kNone) {
        g = load<C>(grad_out, 0);
        if (reduction == kMean) g /= load<C>(total_weight, 0);
    }
    const size_t row_bytes = static_cast<size_t>(classes) * element_size(grad_logp.dtype);
    parallel_rows(pool, rows, classes, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            // All-zero bits are +0 in every floating dtype; the last dimension is contiguous.
            std::memset(at(grad_logp, r), 0, row_bytes);
            const int64_t t = load<int64_t>(target, r);
            if (t == ignore_index) continue;
            const C gr = reduction == kNone ? load<C>(grad_out, r) : g;
            store_at(grad_logp, r, t, -w[t] * gr);
        }
    });
}

}  // namespace

Status nll_loss(const TensorView& out, const TensorView& total_weight, const TensorView& logp,
                const TensorView& target, const TensorView& weight, int64_t reduction,
                int64_t ignore_index, runtime::ThreadPool* pool) {
    const char* op = "nll_loss";
    EMBER_RETURN_IF_ERROR(check_args(op, logp, target, weight, reduction));
    const int64_t rows = logp.sizes[0], classes = logp.sizes[1];
    if (reduction == kNone) EMBER_RETURN_IF_ERROR(check_vector(op, "output", out, rows));
    else EMBER_RETURN_IF_ERROR(check_scalar(op, "output", out));
    if (total_weight.data != nullptr) EMBER_RETURN_IF_ERROR(check_scalar(op, "total_weight", total_weight));
    EMBER_RETURN_IF_ERROR(check_targets(op, target, rows, classes, ignore_index));
    if (logp.dtype == DType::kFloat64)
        run_forward<double>(out, total_weight, logp, target, weight, reduction, ignore_index, pool);
    else
        run_forward<float>(out, total_weight, logp, target, weight, reduction, ignore_index, pool);
    return Status();
}

Status nll_loss_backward(const TensorView& grad_logp, const TensorView& grad_out,
                         const TensorView& target, const TensorView& weight,
                         const TensorView& total_weight, int64_t reduction, int64_t ignore_index,
                         runtime::ThreadPool* pool) {
    const char* op = "nll_loss_backward";
    EMBER_RETURN_IF_ERROR(check_args(op, grad_logp, target, weight, reduction));
    const int64_t rows = grad_logp.sizes[0], classes = grad_logp.sizes[1];
    if (reduction == kNone) EMBER_RETURN_IF_ERROR(check_vector(op, "grad_output", grad_out, rows));
    else EMBER_RETURN_IF_ERROR(check_scalar(op, "grad_output", grad_out));
    if (reduction == kMean) EMBER_RETURN_IF_ERROR(check_scalar(op, "total_weight", total_weight));
    EMBER_RETURN_IF_ERROR(check_targets(op, target, rows, classes, ignore_index));
    if (grad_logp.dtype == DType::kFloat64)
        run_backward<double>(grad_logp, grad_out, target, weight, total_weight, reduction, ignore_index, pool);
    else
        run_backward<float>(grad_logp, grad_out, target, weight, total_weight, reduction, ignore_index, pool);
    return Status();
}

}  // namespace ember::kernels
