#include "kernels/conv/conv.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/dispatch.h"

namespace ember::kernels {
namespace {
ConvProvider g_forward = nullptr;
ConvBackwardProvider g_backward = nullptr;
const char* g_name = "none";

Status check(const TensorView& input, const TensorView& weight, const ConvParams& p) {
    if (p.spatial < 1 || p.spatial > 3) return invalid_argument("conv: 1 to 3 spatial dims");
    if (input.ndim != p.spatial + 2 || weight.ndim != p.spatial + 2) {
        return invalid_argument("conv: input and weight need " + std::to_string(p.spatial + 2) + " dims");
    }
    if (input.dtype != weight.dtype) return invalid_argument("conv: input and weight dtypes differ");
    if (p.groups < 1) return invalid_argument("conv: groups must be positive");
    return Status();
}
}  // namespace

void set_conv_provider(ConvProvider forward, ConvBackwardProvider backward, const char* name) {
    g_forward = forward;
    g_backward = backward;
    g_name = name;
}

const char* conv_provider_name() { return g_name; }

namespace {

// Multiply-adds below which one thread is quicker than a split (the provider's own crossover).
constexpr double kSplitFlops = 1 << 24;

double flops(const TensorView& out, const TensorView& weight) {
    double n = 1;
    for (int d = 0; d < out.ndim; ++d) n *= static_cast<double>(out.sizes[d]);
    for (int d = 1; d < weight.ndim; ++d) n *= static_cast<double>(weight.sizes[d]);
    return 2 * n;
}

// Samples [begin, end) of a batched view.
TensorView batch_slice(const TensorView& v, int64_t begin, int64_t end) {
    TensorView s = v;
    if (v.data == nullptr) return s;
    s.data = static_cast<char*>(v.data) + begin * v.strides[0] * static_cast<int64_t>(element_size(v.dtype));
    s.sizes[0] = end - begin;
    return s;
}

// How many parts to split a batch of n into (1: no split).
int64_t parts_for(int64_t n, double work, runtime::ThreadPool* pool) {
    if (pool == nullptr || pool->num_threads() < 2 || n < 2 || work < kSplitFlops) return 1;
    return std::min<int64_t>(n, pool->num_threads());
}

// Runs part(k) for k in [0, parts) over the pool; the first failure is returned.
template <typename F>
Status run_parts(int64_t parts, runtime::ThreadPool* pool, F&& part) {
    std::vector<Status> status(static_cast<size_t>(parts));
    pool->parallel_for(parts, 1, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) status[static_cast<size_t>(k)] = part(k);
    });
    for (const Status& s : status) EMBER_RETURN_IF_ERROR(s);
    return Status();
}

// A contiguous scratch tensor shaped like `like`.
struct Scratch {
    std::vector<unsigned char> bytes;
    TensorView view;
    explicit Scratch(const TensorView& like) {
        view = like;
        bytes.resize(static_cast<size_t>(like.numel()) * element_size(like.dtype));
        view.data = bytes.data();
        int64_t stride = 1;
        for (int d = like.ndim - 1; d >= 0; --d) {
            view.strides[d] = stride;
            stride *= like.sizes[d];
        }
    }
};

// dst += each partial, element by element in double (dst contiguous, partials like it).
void add_partials(const TensorView& dst, const std::vector<Scratch>& partials) {
    const int64_t n = dst.numel();
    EMBER_DISPATCH_REAL(dst.dtype, {
        auto* d = static_cast<scalar_t*>(dst.data);
        for (int64_t i = 0; i < n; ++i) {
            double acc = detail::as_double(d[i]);
            for (const Scratch& p : partials) acc += detail::as_double(static_cast<const scalar_t*>(p.view.data)[i]);
            d[i] = detail::from_double<scalar_t>(acc);
        }
    });
}

}  // namespace

Status conv(const ConvArgs& args, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check(args.input, args.weight, args.params));
    if (g_forward == nullptr) return internal_error("conv: no convolution provider registered");
    const int64_t n = args.input.sizes[0];
    const int64_t parts = parts_for(n, flops(args.out, args.weight), pool);
    if (parts == 1) return g_forward(args);
    return run_parts(parts, pool, [&](int64_t k) {
        ConvArgs a = args;
        a.input = batch_slice(args.input, n * k / parts, n * (k + 1) / parts);
        a.out = batch_slice(args.out, n * k / parts, n * (k + 1) / parts);
        a.threads = 1;
        return g_forward(a);
    });
}

Status conv_backward(const ConvBackwardArgs& args, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check(args.input, args.weight, args.params));
    if (g_backward == nullptr) return internal_error("conv: no convolution provider registered");
    const int64_t n = args.input.sizes[0];
    int64_t parts = parts_for(n, 2 * flops(args.grad_out, args.weight), pool);
    // Partial parameter gradients are summed into contiguous outputs only.
    if ((args.grad_weight.data != nullptr && !args.grad_weight.is_contiguous()) ||
        (args.grad_bias.data != nullptr && !args.grad_bias.is_contiguous()))
        parts = 1;
    if (parts == 1) return g_backward(args);
    // Float16/bfloat16 parameter gradients are accumulated in float over the whole batch and
    // rounded once, as the CPU does: partial sums rounded to the parameter dtype first lose what
    // cancels between samples. So the batch splits for the input gradient only, and one call
    // computes the parameter gradients.
    auto half = [](const TensorView& g) {
        return g.data != nullptr && (g.dtype == DType::kBFloat16 || g.dtype == DType::kFloat16);
    };
    // Part k's arguments: its slice of the batch, on one thread.
    auto part = [&](int64_t k) {
        const int64_t b = n * k / parts, e = n * (k + 1) / parts;
        ConvBackwardArgs a = args;
        a.grad_out = batch_slice(args.grad_out, b, e);
        a.input = batch_slice(args.input, b, e);
        a.grad_input = batch_slice(args.grad_input, b, e);
        a.threads = 1;
        return a;
    };
    if (half(args.grad_weight) || half(args.grad_bias)) {
        if (args.grad_input.data != nullptr) {
            EMBER_RETURN_IF_ERROR(run_parts(parts, pool, [&](int64_t k) {
                ConvBackwardArgs a = part(k);
                a.grad_weight = TensorView();
                a.grad_bias = TensorView();
                return g_backward(a);
            }));
        }
        ConvBackwardArgs a = args;
        a.grad_input = TensorView();
        return g_backward(a);
    }
    // Part 0 writes the parameter gradients themselves, the others into scratch summed after.
    std::vector<Scratch> gw, gb;
    for (int64_t k = 1; k < parts; ++k) {
        if (args.grad_weight.data != nullptr) gw.emplace_back(args.grad_weight);
        if (args.grad_bias.data != nullptr) gb.emplace_back(args.grad_bias);
    }
    EMBER_RETURN_IF_ERROR(run_parts(parts, pool, [&](int64_t k) {
        ConvBackwardArgs a = part(k);
        if (k > 0 && args.grad_weight.data != nullptr) a.grad_weight = gw[static_cast<size_t>(k - 1)].view;
        if (k > 0 && args.grad_bias.data != nullptr) a.grad_bias = gb[static_cast<size_t>(k - 1)].view;
        return g_backward(a);
    }));
    if (args.grad_weight.data != nullptr) add_partials(args.grad_weight, gw);
    if (args.grad_bias.data != nullptr) add_partials(args.grad_bias, gb);
    return Status();
}

}  // namespace ember::kernels
