// colrow: the command-line tool. Verbs: train, eval, generate, tokenize,
// bench mlp|decode|comm|tp-profile.
// Run under mpirun; every rank parses the same flags and validates the same configuration, so a
// bad flag or size fails on every rank alike with one clear line each.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "cli.h"
#include "colrow/core/error.h"
#include "colrow/dist/mpi_communicator.h"
#include "colrow/runtime/blas_environment.h"

namespace {

constexpr double kFailureAgreementSeconds = 5.0;

// Prints the error on this rank, then ends the job: cleanly when every rank
// failed alike (a configuration error), by abort when some rank is elsewhere
// (possibly waiting in a collective), so no rank is ever left hanging.
int fail(colrow::MpiSession& mpi, const std::string& message) {
  colrow::Communicator& world = mpi.world();
  // One write per line: unbuffered stderr would interleave the ranks' pieces.
  const std::string line = "[rank " + std::to_string(world.rank()) + "/" +
                           std::to_string(world.size()) + "] " + message + "\n";
  std::cerr << line << std::flush;
  if (world.all_ranks_failing(kFailureAgreementSeconds)) return 1;
  world.abort(1);
  return 1;  // not reached: abort ends the process
}

}  // namespace

int main(int argc, char** argv) {
  colrow::configure_blas_environment(argv);  // may restart the program once, before MPI starts
  colrow::MpiSession mpi(&argc, &argv);
  if (mpi.world().rank() == 0) {
    const std::string notice = colrow::blas_environment_notice();
    if (!notice.empty()) std::cerr << notice + "\n" << std::flush;
  }
  colrow::apps::CommandLine cli;
  try {
    try {
      cli.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) {  // --help: printed once, by rank 0
        if (mpi.world().rank() == 0) cli.exit(e);
        return 0;
      }
      throw colrow::ConfigError("[cli] " + std::string(e.what()) + ". Run 'colrow --help'.");
    }
    const colrow::Launch launch{mpi.world(), mpi.local_rank(), mpi.local_ranks()};
    const colrow::apps::CliOptions& o = cli.options();
    const std::string verb = cli.verb();
    if (verb == "train") return colrow::run_training(o.train, launch);
    if (verb == "eval") return colrow::apps::run_eval(o.eval, launch);
    if (verb == "generate") return colrow::apps::run_generate(o.generate, launch);
    if (verb == "tokenize") return colrow::apps::run_tokenize(o.tokenize, launch);
    if (verb == "bench mlp") return colrow::apps::run_mlp_bench(o.bench_mlp, launch);
    if (verb == "bench decode") return colrow::apps::run_decode_bench(o.bench_decode, launch);
    if (verb == "bench comm") return colrow::apps::run_comm_bench(o.bench_comm, launch);
    if (verb == "bench tp-profile") {
      return colrow::apps::run_tp_profile_bench(o.bench_tp_profile, launch);
    }
    throw colrow::InternalError("[cli] verb (" + verb + ") has no run function.");
  } catch (const std::exception& e) {
    return fail(mpi, e.what());
  }
}
