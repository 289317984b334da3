// SHA-256 (FIPS 180-4), for compile-cache keys and entry checksums. Small and dependency-free.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember::compiler {

class Sha256 {
  public:
    Sha256();
    void update(std::string_view data);
    std::array<uint8_t, 32> digest();  // finishes; call once

  private:
    void block(const uint8_t* p);
    uint32_t h_[8];
    uint8_t buf_[64];
    size_t len_ = 0;
    uint64_t total_ = 0;
};

std::array<uint8_t, 32> sha256(std::string_view data);
std::string to_hex(const uint8_t* data, size_t n);

}  // namespace ember::compiler
