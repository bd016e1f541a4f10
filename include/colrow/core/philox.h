// Philox4x32-10, the counter-based generator of Salmon et al., "Parallel Random
// Numbers: As Easy as 1, 2, 3" (SC'11), as in Random123 and cuRAND. Output is a
// pure function of (counter, key), so element i of a parameter is drawn from
// counter (i, hash(name)) and key (seed): every rank generates exactly its own
// shard and the model is identical at every tp, with no state to carry.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace colrow {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox4x32 on one 128-bit counter.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// 64-bit FNV-1a of a parameter name: the stream that name draws from.
uint64_t name_stream(const std::string& name);

// Deterministic draws for element `index` of the stream of (seed, stream).
// uniform01 lies in [0, 1); standard_normal uses Box-Muller on two lanes.
float uniform01(uint64_t seed, uint64_t stream, uint64_t index);
float standard_normal(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace colrow
