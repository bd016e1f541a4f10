// The device runtime of a CPU-only build (COLROW_CUDA=OFF, or no CUDA toolkit
// at configure time): there is no GPU to reach, and every entry that needs one
// says so and how to rebuild.
#include "core/device_runtime.h"

#include "colrow/core/error.h"

namespace colrow::device_runtime {
namespace {

[[noreturn]] void not_built(const std::string& what) {
  throw ConfigError("[device] " + what +
                    " needs CUDA, but this colrow was built without it. Rebuild with the CUDA "
                    "toolkit installed (cmake -DCOLROW_CUDA=ON), or use --device cpu.");
}

}  // namespace

bool built() {
  return false;
}

int device_count() {
  return 0;
}

std::string unavailable_reason() {
  return "this colrow was built without CUDA (configure with -DCOLROW_CUDA=ON)";
}

Allocator& allocator(int index) {
  not_built("a tensor on cuda:" + std::to_string(index));
}

void copy(const Tensor&, Tensor&) {
  not_built("a copy to or from a GPU");
}

void fill(Tensor&, float) {
  not_built("filling a GPU tensor");
}

void convert(const Tensor&, Tensor&) {
  not_built("converting a GPU tensor");
}

void synchronize(int) {}

std::string physical_id(int index) {
  not_built("the UUID of cuda:" + std::to_string(index));
}

size_t host_wait_count() {
  return 0;
}

void begin_capture(int index) {
  not_built("a CUDA graph on cuda:" + std::to_string(index));
}

bool capturing(int) {
  return false;
}

Graph end_capture(int index) {
  not_built("a CUDA graph on cuda:" + std::to_string(index));
}

void abandon_capture(int) {}

void replay(int index, Graph) {
  not_built("a CUDA graph on cuda:" + std::to_string(index));
}

void destroy_graph(Graph) {}

Mark create_mark(int index) {
  not_built("timing on cuda:" + std::to_string(index));
}

void record_mark(int index, Mark) {
  not_built("timing on cuda:" + std::to_string(index));
}

float elapsed_ms(Mark, Mark) {
  not_built("timing on a GPU");
}

}  // namespace colrow::device_runtime
