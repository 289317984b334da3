// The ember generator: counter-based, its whole state 16 bytes (seed, offset) as CUDA's Philox
// generator, so that DTensor-style code can seed and fork it the same way. Each random op
// consumes `offset` ranges; a given (seed, offset) always yields the same numbers.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace ember::torch_glue {

constexpr uint64_t kDefaultRngSeed = 67280421310721ULL;  // CUDA's default seed

class EmberGenerator final : public c10::GeneratorImpl {
  public:
    explicit EmberGenerator(c10::DeviceIndex index, uint64_t seed = kDefaultRngSeed);

    void set_current_seed(uint64_t seed) override;
    uint64_t current_seed() const override { return seed_; }
    uint64_t seed() override;
    void set_offset(uint64_t offset) override { offset_ = offset; }
    uint64_t get_offset() const override { return offset_; }
    void set_state(const c10::TensorImpl& new_state) override;
    c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
    static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

    // Reserves `increment` counter values and returns the (seed, offset) they start at.
    std::pair<uint64_t, uint64_t> philox_engine_inputs(uint64_t increment);

  private:
    EmberGenerator* clone_impl() const override;
    uint64_t seed_;
    uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex index);

}  // namespace ember::torch_glue
