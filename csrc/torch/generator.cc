#include "generator.h"

#include <ATen/Utils.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <random>

#include "context.h"
#include "runtime/device.h"

namespace ember::torch_glue {

EmberGenerator::EmberGenerator(c10::DeviceIndex index, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void EmberGenerator::set_current_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
}

uint64_t EmberGenerator::seed() {
    std::random_device rd;
    uint64_t s = (static_cast<uint64_t>(rd()) << 32) | rd();
    set_current_seed(s);
    return s;
}

void EmberGenerator::set_state(const c10::TensorImpl& new_state) {
    TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                     "ember RNG state must be a torch.ByteTensor");
    TORCH_CHECK(new_state.numel() == 16, "ember RNG state must hold 16 bytes (seed, offset), got ",
                new_state.numel());
    const auto* bytes = static_cast<const uint8_t*>(new_state.data());
    std::memcpy(&seed_, bytes, 8);
    std::memcpy(&offset_, bytes + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> EmberGenerator::get_state() const {
    auto state = at::detail::empty_cpu({16}, at::kByte, std::nullopt, std::nullopt, std::nullopt,
                                       std::nullopt);
    auto* bytes = state.data_ptr<uint8_t>();
    std::memcpy(bytes, &seed_, 8);
    std::memcpy(bytes + 8, &offset_, 8);
    return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> EmberGenerator::philox_engine_inputs(uint64_t increment) {
    // Offsets advance in multiples of 4, as Philox produces four 32-bit values per counter.
    increment = ((increment + 3) / 4) * 4;
    uint64_t offset = offset_;
    offset_ += increment;
    return {seed_, offset};
}

EmberGenerator* EmberGenerator::clone_impl() const {
    auto* g = new EmberGenerator(device().index(), seed_);
    g->offset_ = offset_;
    return g;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
    static std::once_flag once;
    static std::deque<at::Generator> gens;
    std::call_once(once, [] {
        for (int i = 0; i < runtime::device_count(); ++i) {
            gens.emplace_back(at::make_generator<EmberGenerator>(static_cast<c10::DeviceIndex>(i)));
        }
    });
    int i = index < 0 ? runtime::current_device() : index;
    TORCH_CHECK(i >= 0 && i < static_cast<int>(gens.size()), "ember: invalid device index ", i);
    return gens[i];
}

}  // namespace ember::torch_glue
