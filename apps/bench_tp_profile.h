// `colrow bench tp-profile`: when does communication dominate the
// tensor-parallel MLP forward (gelu, bias, ffn = 4 d_model)? For R = 1, 2, 4,
// ... up to the world size the first R ranks form a tp group (the others wait);
// for d_model = --min-d, 2 --min-d, ... --max-d at --tokens tokens it times
//   t_total:   the sharded forward, its all-reduce included;
//   t_compute: one rank's shard of that work with no communication (an MLP of
//              ffn 4d/R in a group of one: the same GEMM shapes);
//   t_comm:    all_reduce_sum of [tokens, d_model] over the same tp group;
// and sets the measured t_comm / t_compute beside the cost model's
// (runtime/tp_cost_model.h) with both lambdas measured in the same run.
// Prints a table (or --json), writes --out-json and an SVG plot (--out-svg).
#pragma once

#include <cstdint>
#include <string>

#include "colrow/runtime/placement.h"

namespace colrow::apps {

struct TpProfileOptions {
  int64_t min_d = 256;
  int64_t max_d = 8192;
  int64_t tokens = 2048;
  int threads = 0;  // per rank, the whole run; 0: cores / ranks on the node
  int iterations = 5;
  std::string comm = "auto";                 // auto (shared memory on one node) | shm | mpi
  std::string out_json = "tp-profile.json";  // "" writes none
  std::string out_svg = "tp-profile.svg";    // "" writes none
  bool json = false;                         // the JSON on stdout instead of the table
};

// Returns the process exit status (0 whether or not the model's aim holds:
// that is a finding, not a failure).
int run_tp_profile_bench(const TpProfileOptions& options, const Launch& launch);

}  // namespace colrow::apps
