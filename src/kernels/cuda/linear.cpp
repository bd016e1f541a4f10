// cuBLASLt with epilogues for a linear layer (linear.h). Row-major [r, c]
// with row stride ld is, to column-major cuBLAS, [c, r] with leading dim ld
// (kernels/cuda/gemm.cu), so:
//   y = x w^T + b   is  y' [out, tokens] = op_T(w' [in, out]) x' [in, tokens],
//                       b added to every column (a bias of y's m = out rows);
//   dw += dy^T x    is  dw' [in, out] += x' [in, tokens] op_T(dy' [out, tokens]),
//                       db = the sums of dy' over the GEMM's k (tokens): BGRADB,
//                       which writes a fresh vector that is then added to db.
// bf16 operands (mixed precision): A and B bf16, fp32 accumulation; forward's
// D and bias bf16, the gradients' D and bias gradient fp32 (cuBLASLt's bias
// vector takes D's type). Where cuBLASLt has no algorithm, the CPU's pattern
// runs instead: fp32 product, fp32 bias, one rounding.
// The GELU MLP's pair (bf16 only): forward's GELU_AUX(_BIAS) writes
// gelu(x w^T + b) to D and the pre-activation to the aux matrix, laid out as
// D; the input gradient's DGELU multiplies dy w by gelu'(aux) before its one
// rounding:  dx' [in, tokens] = w' [in, out] dy' [out, tokens], aux = pre'.
// cuBLASLt's GELU is the tanh form. fp32 keeps the separate kernels, the
// reference the GPU is checked against at 1e-5: cuBLASLt does not document
// its GELU's accuracy, and bf16's rounding (2^-9) covers any such error.
#include "kernels/cuda/linear.h"

#include <cublasLt.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "colrow/core/error.h"
#include "core/cuda/cuda_context.h"
#include "kernels/checks/bias.h"
#include "kernels/checks/gemm.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/bias.h"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kept_buffers.h"
#include "kernels/cuda/operands.h"
#include "kernels/cuda/residual.h"
#include "kernels/mixed_precision.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;  // what NVIDIA suggests for Hopper

std::atomic<bool> g_fused_epilogues{true};

// One workspace per GPU for the program's life (kept_buffers.h): the GEMMs
// run on its compute stream one after another.
void* workspace(int device) {
  return kept_scratch(device, "cublaslt.workspace", {kWorkspaceBytes / 4}).data();
}

// The largest power of two up to 16 that divides the address: cuBLASLt's
// heuristic otherwise assumes 16-byte operands, which a column slice of a
// fused buffer need not be (a bf16 one may be 2-byte aligned only).
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 16;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

cudaDataType_t cuda_type(const Tensor& t) {
  return t.dtype() == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// One column-major operand: stored [rows, cols] with leading dim ld.
struct Operand {
  const void* data;
  cudaDataType_t type;
  int64_t rows, cols, ld;
};

Operand operand(const Tensor& t, int64_t rows, int64_t cols) {
  return {t.raw_data(), cuda_type(t), rows, cols, t.row_stride()};
}

// One problem's descriptors, and the algorithm cuBLASLt's heuristic chose
// for them (or its refusal): built once per shape, dtype, epilogue and
// operand alignment, then kept for the program, as PyTorch caches its
// cuBLASLt plans. Building them (five descriptors and a heuristic query,
// tens of microseconds of host time) per call was most of a small GEMM's
// launch cost; a kept plan only has its pointers set before each call.
class Plan {
 public:
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (preference_ != nullptr) cublasLtMatmulPreferenceDestroy(preference_);
    for (cublasLtMatrixLayout_t l : layouts_) {
      if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
    }
    if (op_ != nullptr) cublasLtMatmulDescDestroy(op_);
  }
  cublasLtMatmulDesc_t& op() { return op_; }
  cublasLtMatrixLayout_t& layout(int i) { return layouts_[i]; }
  cublasLtMatmulPreference_t& preference() { return preference_; }
  cublasLtMatmulHeuristicResult_t result{};
  cublasStatus_t status = CUBLAS_STATUS_NOT_INITIALIZED;  // SUCCESS: result.algo runs it

 private:
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t layouts_[3] = {nullptr, nullptr, nullptr};
  cublasLtMatmulPreference_t preference_ = nullptr;
};

template <typename T>
void set_op(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  COLROW_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)));
}

template <typename T>
void set_preference(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attribute,
                    const T& value) {
  COLROW_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attribute, &value, sizeof(value)));
}

// The epilogue's aux matrix (GELU's input), laid out as D; none by default.
struct Aux {
  const void* data = nullptr;
  int64_t ld = 0;
};

// Everything a plan depends on: what the descriptors hold, and the operands'
// alignments (the heuristic's choice depends on them, not on the addresses).
using PlanKey = std::array<int64_t, 23>;

std::mutex g_plans_mutex;
// Never destroyed: the handles they belong to outlive the statics.
auto* g_plans = new std::map<PlanKey, std::unique_ptr<Plan>>;

void build_plan(Plan& plan, int device, cublasComputeType_t compute, cublasOperation_t op_a,
                cublasOperation_t op_b, const Operand& a, const Operand& b, const Operand& d,
                cublasLtEpilogue_t epilogue, const void* bias, Aux aux) {
  COLROW_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op(), compute, CUDA_R_32F));
  set_op(plan.op(), CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_op(plan.op(), CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set_op(plan.op(), CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  set_op(plan.op(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (aux.data != nullptr) {
    set_op(plan.op(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.data);
    set_op(plan.op(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux.ld);
  }
  COLROW_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.layout(0), a.type, a.rows, a.cols, a.ld));
  COLROW_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.layout(1), b.type, b.rows, b.cols, b.ld));
  COLROW_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.layout(2), d.type, d.rows, d.cols, d.ld));
  COLROW_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&plan.preference()));
  set_preference(plan.preference(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                 static_cast<uint64_t>(kWorkspaceBytes));
  set_preference(plan.preference(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                 alignment_of(a.data));
  set_preference(plan.preference(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 alignment_of(b.data));
  set_preference(plan.preference(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                 alignment_of(d.data));
  set_preference(plan.preference(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                 alignment_of(d.data));
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      colrow::cuda::cublaslt_handle(device), plan.op(), plan.layout(0), plan.layout(1),
      plan.layout(2), plan.layout(2), plan.preference(), 1, &plan.result, &found);
  if (status == CUBLAS_STATUS_SUCCESS && found == 0) {
    plan.status = CUBLAS_STATUS_NOT_SUPPORTED;
  } else if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    plan.status = status;
  } else {
    COLROW_CUBLAS_CHECK(status);
    plan.status = CUBLAS_STATUS_SUCCESS;
  }
}

// d = op_a(a) op_b(b) + beta d with `epilogue` reading or writing `bias`
// (and `aux`):
// CUBLAS_STATUS_SUCCESS once queued; the status (nothing queued) when
// cuBLASLt has no algorithm for it or refuses the problem, as PyTorch's
// gemm_and_bias falls back on any refusal; other errors throw.
cublasStatus_t lt_matmul(int device, cublasOperation_t op_a, cublasOperation_t op_b,
                         const Operand& a, const Operand& b, float beta, const Operand& d,
                         cublasLtEpilogue_t epilogue, const void* bias, Aux aux = {}) {
  const cublasComputeType_t compute = colrow::cuda::allow_tf32() && a.type == CUDA_R_32F
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  const PlanKey key = {device,
                       compute,
                       op_a,
                       op_b,
                       epilogue,
                       a.type,
                       b.type,
                       d.type,
                       a.rows,
                       a.cols,
                       a.ld,
                       b.rows,
                       b.cols,
                       b.ld,
                       d.rows,
                       d.cols,
                       d.ld,
                       aux.data != nullptr ? aux.ld : -1,
                       alignment_of(a.data),
                       alignment_of(b.data),
                       alignment_of(d.data),
                       bias != nullptr ? alignment_of(bias) : 0,
                       aux.data != nullptr ? alignment_of(aux.data) : 0};
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  std::unique_ptr<Plan>& slot = (*g_plans)[key];
  if (!slot) {
    auto plan = std::make_unique<Plan>();
    build_plan(*plan, device, compute, op_a, op_b, a, b, d, epilogue, bias, aux);
    slot = std::move(plan);  // kept only once whole: a throw above leaves no half-built plan
  }
  Plan& plan = *slot;
  if (plan.status != CUBLAS_STATUS_SUCCESS) return plan.status;
  // This call's addresses, of the alignments the plan was chosen for.
  set_op(plan.op(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  if (aux.data != nullptr) set_op(plan.op(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.data);
  const float alpha = 1.0f;
  const cublasStatus_t run = cublasLtMatmul(
      colrow::cuda::cublaslt_handle(device), plan.op(), &alpha, a.data, plan.layout(0), b.data,
      plan.layout(1), &beta, d.data, plan.layout(2), const_cast<void*>(d.data), plan.layout(2),
      &plan.result.algo, workspace(device), kWorkspaceBytes, colrow::cuda::compute_stream(device));
  if (run == CUBLAS_STATUS_NOT_SUPPORTED) return run;  // refused before queuing anything
  COLROW_CUBLAS_CHECK(run);
  return run;
}

// Says once per call site that it runs unfused, so that a profile's extra
// bias or activation passes have an explanation.
void note_unfused(std::atomic<bool>& noted, const char* what, cublasStatus_t why) {
  if (!noted.exchange(true)) {
    std::fprintf(stderr,
                 "[cublaslt] note: no algorithm for %s with its epilogue (%s); the GEMM and the "
                 "element-wise kernel run separately\n",
                 what, cublasGetStatusName(why));
  }
}

// cuBLASLt's rules for a GELU aux matrix: a leading dimension divisible by 8
// and, as every operand here, 16-byte aligned bf16 (else: the kernels).
bool gelu_epilogue_fits(const Tensor& pre_activation, const Tensor& out) {
  return out.dtype() == DType::kBF16 && pre_activation.dtype() == DType::kBF16 &&
         pre_activation.row_stride() % 8 == 0 &&
         reinterpret_cast<uintptr_t>(pre_activation.raw_data()) % 16 == 0;
}

void require_like(const char* what, const Tensor& pre_activation, const Tensor& out) {
  if (pre_activation.shape() != out.shape()) {
    throw InternalError(std::string("[linear] ") + what + ": pre_activation " +
                        shape_to_string(pre_activation.shape()) + " must be shaped like " +
                        shape_to_string(out.shape()));
  }
}

}  // namespace

void set_fused_epilogues(bool fused) {
  g_fused_epilogues = fused;
}

bool fused_epilogues() {
  return g_fused_epilogues;
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const auto [tokens, out, in] = check_gemm(Trans::kNo, Trans::kYes, x, w, y);
  check_bias(y, b, "linear_forward");
  check_linear_dtypes("linear_forward", x, w, y, b, false);
  const int device = cuda_device_of("linear_forward", {&x, &w, &b, &y});
  if (fused_epilogues() && tokens > 0 && out > 0 && in > 0) {
    const cublasStatus_t fused =
        lt_matmul(device, CUBLAS_OP_T, CUBLAS_OP_N, operand(w, in, out), operand(x, in, tokens),
                  0.0f, operand(y, out, tokens), CUBLASLT_EPILOGUE_BIAS, b.raw_data());
    if (fused == CUBLAS_STATUS_SUCCESS) return;
    static std::atomic<bool> noted{false};
    note_unfused(noted, "linear_forward", fused);
  }
  if (y.dtype() == DType::kF32) {
    gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, y);
    add_bias(y, b);
    return;
  }
  Tensor y32 = Tensor::empty(y.shape(), y.device());  // fp32 sums, the bias, one rounding
  gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, y32);
  add_bias(y32, b.to(DType::kF32));
  store_rounded(y32, y);
}

void linear_weight_grads(const Tensor& dy, const Tensor& x, Tensor& dw, Tensor& db) {
  const auto [out, in, tokens] = check_gemm(Trans::kYes, Trans::kNo, dy, x, dw);
  check_bias(dy, db, "linear_weight_grads");
  check_linear_dtypes("linear_weight_grads", dy, x, dw, db, true);
  const int device = cuda_device_of("linear_weight_grads", {&dy, &x, &dw, &db});
  if (fused_epilogues() && tokens > 0 && out > 0 && in > 0) {
    Tensor sums = kept_scratch(device, "linear.bias_grad_sums", {out});  // BGRADB overwrites
    const cublasStatus_t fused = lt_matmul(device, CUBLAS_OP_N, CUBLAS_OP_T, operand(x, in, tokens),
                                           operand(dy, out, tokens), 1.0f, operand(dw, in, out),
                                           CUBLASLT_EPILOGUE_BGRADB, sums.data());
    if (fused == CUBLAS_STATUS_SUCCESS) {
      add_into(db, sums);
      return;
    }
    static std::atomic<bool> noted{false};
    note_unfused(noted, "linear_weight_grads", fused);
  }
  gemm(Trans::kYes, Trans::kNo, 1.0f, dy, x, 1.0f, dw);
  accumulate_bias_grad(dy, db);  // reads bf16 dy natively
}

void linear_gelu_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& pre_activation,
                         Tensor& y) {
  const char* what = "linear_gelu_forward";
  const auto [tokens, out, in] = check_gemm(Trans::kNo, Trans::kYes, x, w, y);
  require_like(what, pre_activation, y);
  check_linear_dtypes(what, x, w, y, pre_activation, false);
  if (b != nullptr) {
    check_bias(y, *b, what);
    check_linear_dtypes(what, x, w, y, *b, false);
  }
  const int device = cuda_device_of(what, {&x, &w, b, &pre_activation, &y});
  if (fused_epilogues() && tokens > 0 && out > 0 && in > 0 &&
      gelu_epilogue_fits(pre_activation, y)) {
    const cublasStatus_t fused =
        lt_matmul(device, CUBLAS_OP_T, CUBLAS_OP_N, operand(w, in, out), operand(x, in, tokens),
                  0.0f, operand(y, out, tokens),
                  b != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX,
                  b != nullptr ? b->raw_data() : nullptr,
                  Aux{pre_activation.raw_data(), pre_activation.row_stride()});
    if (fused == CUBLAS_STATUS_SUCCESS) return;
    static std::atomic<bool> noted{false};
    note_unfused(noted, what, fused);
  }
  if (b != nullptr) {
    linear_forward(x, w, *b, pre_activation);
  } else {
    gemm(Trans::kNo, Trans::kYes, 1.0f, x, w, 0.0f, pre_activation);
  }
  gelu_forward(GeluForm::kTanh, pre_activation, y);
}

void gelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre_activation, Tensor& dx) {
  const char* what = "gelu_input_grad";
  const auto [tokens, in, out] = check_gemm(Trans::kNo, Trans::kNo, dy, w, dx);
  require_like(what, pre_activation, dx);
  check_linear_dtypes(what, dy, w, dx, pre_activation, false);
  const int device = cuda_device_of(what, {&dy, &w, &pre_activation, &dx});
  if (fused_epilogues() && tokens > 0 && out > 0 && in > 0 &&
      gelu_epilogue_fits(pre_activation, dx)) {
    const cublasStatus_t fused =
        lt_matmul(device, CUBLAS_OP_N, CUBLAS_OP_N, operand(w, in, out), operand(dy, out, tokens),
                  0.0f, operand(dx, in, tokens), CUBLASLT_EPILOGUE_DGELU, nullptr,
                  Aux{pre_activation.raw_data(), pre_activation.row_stride()});
    if (fused == CUBLAS_STATUS_SUCCESS) return;
    static std::atomic<bool> noted{false};
    note_unfused(noted, what, fused);
  }
  gemm(Trans::kNo, Trans::kNo, 1.0f, dy, w, 0.0f, dx);
  gelu_backward(GeluForm::kTanh, pre_activation, dx, dx);  // element for element, in place
}

}  // namespace colrow::kernels::cuda
