// Philox4x32-10 (Salmon et al. 2011) and the per-element draws built on it.
#include "colrow/core/philox.h"

#include <cmath>

namespace colrow {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

PhiloxCounter counter_for(uint64_t stream, uint64_t index) {
  return {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
          static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
}

PhiloxKey key_for(uint64_t seed) {
  return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
}

// 24 random bits -> [0, 1) exactly representable in fp32.
inline double to_unit(uint32_t x) {
  return static_cast<double>(x >> 8) * (1.0 / 16777216.0);
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

uint64_t name_stream(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

float uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(to_unit(philox4x32_10(counter_for(stream, index), key_for(seed))[0]));
}

float standard_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxCounter r = philox4x32_10(counter_for(stream, index), key_for(seed));
  const double u1 = 1.0 - to_unit(r[0]);  // (0, 1]: log stays finite
  const double u2 = to_unit(r[1]);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace colrow
