// cuBLASLt matmuls with kept plans (lt_matmul.h).
#include "kernels/cuda/lt_matmul.h"

#include <array>
#include <map>
#include <memory>
#include <mutex>

#include "core/cuda/cuda_context.h"
#include "kernels/cuda/cublas_handle.h"
#include "kernels/cuda/kept_buffers.h"

namespace colrow::kernels::cuda {
namespace {

constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;  // what NVIDIA suggests for Hopper

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

// One problem's descriptors, and the algorithm cuBLASLt's heuristic chose
// for them (or its refusal), kept for the program (lt_matmul.h).
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

// Everything a plan depends on: what the descriptors hold, and the operands'
// alignments (the heuristic's choice depends on them, not on the addresses).
using PlanKey = std::array<int64_t, 23>;

std::mutex g_plans_mutex;
// Never destroyed: the handles they belong to outlive the statics.
auto* g_plans = new std::map<PlanKey, std::unique_ptr<Plan>>;

void build_plan(Plan& plan, int device, cublasComputeType_t compute, cublasOperation_t op_a,
                cublasOperation_t op_b, const LtOperand& a, const LtOperand& b, const LtOperand& d,
                cublasLtEpilogue_t epilogue, const void* bias, LtAux aux) {
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
  // A bf16 d: no split-K at all, so that d is the fp32 sum rounded once.
  // Measured on the lent H200 (cuBLAS 13, 2026-11-28): with split-K, even
  // with the COMPUTE_TYPE reduction that keeps the partial sums in fp32
  // (numSplitsK 60 for a 37 x 65 x 129 bias GEMM), elements came out 1.7
  // bf16 ulps from the exact sum, which one rounding keeps within half an
  // ulp; TransformerEngine disallows split-K for bf16 outputs too. The
  // GEMMs split-K serves (short and wide) are not where a step's time goes.
  // An fp32 d keeps every scheme: its type is the compute type.
  if (d.type == CUDA_R_16BF) {
    set_preference(plan.preference(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                   static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE));
  }
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

}  // namespace

LtOperand lt_operand(const Tensor& t, int64_t rows, int64_t cols) {
  return {t.raw_data(), t.dtype() == DType::kBF16 ? CUDA_R_16BF : CUDA_R_32F, rows, cols,
          t.row_stride()};
}

cublasStatus_t lt_matmul(int device, cublasOperation_t op_a, cublasOperation_t op_b,
                         const LtOperand& a, const LtOperand& b, float alpha, float beta,
                         const LtOperand& d, cublasLtEpilogue_t epilogue, const void* bias,
                         LtAux aux) {
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
  const cublasStatus_t run = cublasLtMatmul(
      colrow::cuda::cublaslt_handle(device), plan.op(), &alpha, a.data, plan.layout(0), b.data,
      plan.layout(1), &beta, d.data, plan.layout(2), const_cast<void*>(d.data), plan.layout(2),
      &plan.result.algo, workspace(device), kWorkspaceBytes, colrow::cuda::compute_stream(device));
  if (run == CUBLAS_STATUS_NOT_SUPPORTED) return run;  // refused before queuing anything
  COLROW_CUBLAS_CHECK(run);
  return run;
}

}  // namespace colrow::kernels::cuda
