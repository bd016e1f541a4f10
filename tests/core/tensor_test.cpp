// Tensor: construction (empty, zeros, full, from_vector, wrap), shapes and
// strides, slices and shards along dim 0 and dim -1 as views that share storage,
// view/clone/copy_from/fill/to_vector over strided views, ensure_shape's
// reuse of buffers, and the InternalError raised for every malformed request;
// bf16 tensors: element size, strided slices and copies of their bits, fill's
// rounding, to_vector's exact widening, and the refusals that keep fp32 and
// bf16 apart (data() of the other dtype, copy_from across dtypes);
// convert_from: fp32 -> bf16 equals core/bfloat16.h's rounding per element
// (itself tested against a reference in core/bfloat16_test) on sizes below
// and above the parallel threshold and through a tie, NaN, infinity and
// overflow; bf16 -> fp32 is exact, so the round trip gives back a bf16-exact
// input bit for bit; the same dtype copies; shape and contiguity errors.
#include "colrow/core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "colrow/core/bfloat16.h"
#include "colrow/core/error.h"

namespace colrow {
namespace {

// 0, 1, 2, ... : every element distinct, so a wrong offset shows up as a wrong value.
std::vector<float> iota(int64_t count, float start = 0.0f) {
  std::vector<float> v(static_cast<size_t>(count));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// A [rows, cols] matrix holding 100 * i + j at (i, j).
Tensor indexed_matrix(int64_t rows, int64_t cols) {
  Tensor t = Tensor::empty({rows, cols});
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t(i, j) = static_cast<float>(100 * i + j);
  }
  return t;
}

TEST(TensorTest, ShapeHelpers) {
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_to_string({4}), "[4]");
  EXPECT_EQ(shape_to_string({2, 3, 5}), "[2, 3, 5]");
  EXPECT_EQ(shape_numel({}), 1);
  EXPECT_EQ(shape_numel({2, 3, 5}), 30);
  EXPECT_EQ(shape_numel({2, 0, 5}), 0);
}

TEST(TensorTest, EmptyIsOwningContiguousAndAligned) {
  Tensor t = Tensor::empty({2, 3, 4});
  EXPECT_TRUE(t.defined());
  EXPECT_TRUE(t.owns_storage());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.bytes(), 24 * 4);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
}

TEST(TensorTest, DefaultTensorIsUndefined) {
  Tensor t;
  EXPECT_EQ(t.ndim(), 0);
  EXPECT_FALSE(t.owns_storage());
  // A 0-d shape has one element, and there is no data behind it.
  EXPECT_FALSE(t.defined());
}

TEST(TensorTest, SizeAndStrideAcceptNegativeDims) {
  Tensor t = Tensor::empty({2, 3, 4});
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.size(-3), 2);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_EQ(t.stride(-2), 4);
  EXPECT_THROW(t.size(3), InternalError);
  EXPECT_THROW(t.size(-4), InternalError);
  EXPECT_THROW(t.stride(3), InternalError);
}

TEST(TensorTest, ZerosFullFromVector) {
  EXPECT_EQ(Tensor::zeros({2, 3}).to_vector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(Tensor::full({3, 2}, -1.5f).to_vector(), std::vector<float>(6, -1.5f));
  const std::vector<float> values = iota(6, 1.0f);
  Tensor t = Tensor::from_vector({2, 3}, values);
  EXPECT_EQ(t.to_vector(), values);
  // Row-major: (1, 0) is the fourth value.
  EXPECT_EQ(t(1, 0), 4.0f);
  EXPECT_EQ(t(0, 2), 3.0f);
  // 0-d: one element.
  EXPECT_EQ(Tensor::full({}, 2.5f).to_vector(), std::vector<float>{2.5f});
}

TEST(TensorTest, ZeroSizedTensor) {
  Tensor t = Tensor::zeros({0, 3});
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.to_vector().empty());
  t.fill(1.0f);  // nothing to do, and nothing to crash on
  EXPECT_TRUE(t.clone().to_vector().empty());
}

TEST(TensorTest, ConstructionErrors) {
  EXPECT_THROW(Tensor::empty({2, -1}), InternalError);
  EXPECT_THROW(Tensor::from_vector({2, 3}, iota(5)), InternalError);
  EXPECT_THROW(Tensor::from_vector({2, 3}, iota(7)), InternalError);
}

TEST(TensorTest, WrapViewsCallerMemory) {
  std::vector<float> buffer = iota(6);
  Tensor t = Tensor::wrap(buffer.data(), {3, 2});
  EXPECT_FALSE(t.owns_storage());
  EXPECT_TRUE(t.defined());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.data(), buffer.data());
  EXPECT_EQ(t(2, 1), 5.0f);
  t(1, 0) = 42.0f;
  EXPECT_EQ(buffer[2], 42.0f);
  buffer[5] = -7.0f;
  EXPECT_EQ(t(2, 1), -7.0f);
}

TEST(TensorTest, SliceDim0IsContiguousView) {
  Tensor t = indexed_matrix(5, 4);
  Tensor s = t.slice(0, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{3, 4}));
  EXPECT_EQ(s.strides(), t.strides());
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_TRUE(s.owns_storage());  // shares, and keeps alive, the parent's storage
  EXPECT_EQ(s.data(), t.data() + 4);
  EXPECT_EQ(s(0, 0), 100.0f);
  EXPECT_EQ(s(2, 3), 303.0f);
  s(1, 2) = -1.0f;
  EXPECT_EQ(t(2, 2), -1.0f);
}

TEST(TensorTest, SliceLastDimIsStridedView) {
  Tensor t = indexed_matrix(4, 6);
  Tensor s = t.slice(-1, 2, 3);
  EXPECT_EQ(s.shape(), (Shape{4, 3}));
  EXPECT_EQ(s.strides(), (std::vector<int64_t>{6, 1}));
  EXPECT_EQ(s.row_stride(), 6);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.data(), t.data() + 2);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(s(i, j), 100.0f * i + j + 2) << i << "," << j;
  }
  // Writes through the view land in the parent, and only inside the block.
  s.fill(-5.0f);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      const bool inside = j >= 2 && j < 5;
      EXPECT_EQ(t(i, j), inside ? -5.0f : 100.0f * i + j) << i << "," << j;
    }
  }
}

TEST(TensorTest, SliceKeepsStorageAlive) {
  Tensor s;
  {
    Tensor t = indexed_matrix(3, 3);
    s = t.slice(-1, 1, 2);
  }
  // The parent handle is gone; the view's shared storage still holds the values.
  EXPECT_EQ(s.to_vector(), (std::vector<float>{1, 2, 101, 102, 201, 202}));
}

TEST(TensorTest, SliceOfSliceAndEmptySlice) {
  Tensor t = indexed_matrix(6, 8);
  Tensor s = t.slice(0, 1, 4).slice(-1, 2, 5).slice(-1, 1, 2);
  EXPECT_EQ(s.shape(), (Shape{4, 2}));
  EXPECT_EQ(s(0, 0), 103.0f);
  EXPECT_EQ(s(3, 1), 404.0f);
  Tensor e = t.slice(0, 6, 0);
  EXPECT_EQ(e.shape(), (Shape{0, 8}));
  EXPECT_EQ(e.numel(), 0);
}

TEST(TensorTest, BadSlicesThrow) {
  Tensor t = Tensor::zeros({4, 6});
  EXPECT_THROW(t.slice(0, -1, 2), InternalError);
  EXPECT_THROW(t.slice(0, 0, -1), InternalError);
  EXPECT_THROW(t.slice(0, 3, 2), InternalError);  // [3, 5) past 4
  EXPECT_THROW(t.slice(-1, 5, 2), InternalError);
  EXPECT_THROW(t.slice(-1, 7, 0), InternalError);
  EXPECT_THROW(t.slice(2, 0, 1), InternalError);
  EXPECT_THROW(t.slice(-3, 0, 1), InternalError);
  EXPECT_NO_THROW(t.slice(-1, 0, 6));
  EXPECT_NO_THROW(t.slice(0, 4, 0));
}

TEST(TensorTest, ShardsTileTheParent) {
  Tensor t = indexed_matrix(6, 8);
  // Dim 0: row blocks, each contiguous.
  for (int r = 0; r < 3; ++r) {
    Tensor s = t.shard(0, r, 3);
    EXPECT_EQ(s.shape(), (Shape{2, 8}));
    EXPECT_TRUE(s.is_contiguous());
    EXPECT_EQ(s(0, 0), 200.0f * r);
  }
  // Dim -1: column blocks, strided views whose union is the whole matrix.
  for (int r = 0; r < 4; ++r) {
    Tensor s = t.shard(-1, r, 4);
    EXPECT_EQ(s.shape(), (Shape{6, 2}));
    EXPECT_EQ(s.row_stride(), 8);
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(s(i, j), t(i, 2 * r + j));
    }
    s(5, 1) = -static_cast<float>(r + 1);
  }
  EXPECT_EQ(t(5, 1), -1.0f);
  EXPECT_EQ(t(5, 7), -4.0f);
  // One shard of one is the whole tensor.
  EXPECT_EQ(t.shard(1, 0, 1).data(), t.data());
}

TEST(TensorTest, BadShardsThrow) {
  Tensor t = Tensor::zeros({6, 8});
  EXPECT_THROW(t.shard(0, 0, 4), InternalError);   // 6 % 4 != 0
  EXPECT_THROW(t.shard(-1, 0, 3), InternalError);  // 8 % 3 != 0
  EXPECT_THROW(t.shard(0, 2, 2), InternalError);
  EXPECT_THROW(t.shard(0, -1, 2), InternalError);
  EXPECT_THROW(t.shard(0, 0, 0), InternalError);
  EXPECT_THROW(t.shard(0, 0, -2), InternalError);
  EXPECT_THROW(t.shard(2, 0, 1), InternalError);
}

TEST(TensorTest, ViewReshapesSharedStorage) {
  Tensor t = Tensor::from_vector({2, 6}, iota(12));
  Tensor v = t.view({3, 4});
  EXPECT_EQ(v.shape(), (Shape{3, 4}));
  EXPECT_EQ(v.strides(), (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(v.data(), t.data());
  EXPECT_EQ(v(2, 1), 9.0f);
  v(0, 3) = -3.0f;
  EXPECT_EQ(t(0, 3), -3.0f);
  EXPECT_EQ(t.view({12}).size(0), 12);
  EXPECT_EQ(t.view({2, 3, 2}).stride(0), 6);
  // A contiguous slice along dim 0 may be viewed too.
  EXPECT_EQ(t.slice(0, 1, 1).view({6}).to_vector(), iota(6, 6.0f));
}

TEST(TensorTest, ViewErrors) {
  Tensor t = Tensor::zeros({4, 6});
  EXPECT_THROW(t.view({5, 5}), InternalError);
  EXPECT_THROW(t.view({25}), InternalError);
  // A column block is not contiguous: viewing it would read the wrong elements.
  EXPECT_THROW(t.slice(-1, 0, 3).view({12}), InternalError);
  EXPECT_THROW(t.shard(-1, 1, 2).view({4, 3}), InternalError);
}

TEST(TensorTest, CloneIsContiguousAndIndependent) {
  Tensor t = indexed_matrix(4, 6);
  Tensor block = t.slice(-1, 1, 3);
  Tensor c = block.clone();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_TRUE(c.owns_storage());
  EXPECT_NE(c.data(), block.data());
  EXPECT_EQ(c.shape(), (Shape{4, 3}));
  EXPECT_EQ(c.to_vector(), block.to_vector());
  c.fill(0.0f);
  EXPECT_EQ(t(0, 1), 1.0f);
  t(3, 3) = 9.0f;
  EXPECT_EQ(block(3, 2), 9.0f);
}

TEST(TensorTest, ToVectorOfStridedView) {
  Tensor t = indexed_matrix(3, 5);
  EXPECT_EQ(t.slice(-1, 3, 2).to_vector(), (std::vector<float>{3, 4, 103, 104, 203, 204}));
}

TEST(TensorTest, CopyFromStridedIntoContiguous) {
  Tensor t = indexed_matrix(4, 6);
  Tensor dst = Tensor::full({4, 2}, -1.0f);
  dst.copy_from(t.slice(-1, 4, 2));
  EXPECT_EQ(dst.to_vector(), (std::vector<float>{4, 5, 104, 105, 204, 205, 304, 305}));
}

TEST(TensorTest, CopyFromContiguousIntoStrided) {
  Tensor t = indexed_matrix(3, 5);
  Tensor src = Tensor::from_vector({3, 2}, {-1, -2, -3, -4, -5, -6});
  Tensor block = t.slice(-1, 1, 2);
  block.copy_from(src);
  const std::vector<float> expected = {0,   -1, -2, 3,   4,    //
                                       100, -3, -4, 103, 104,  //
                                       200, -5, -6, 203, 204};
  EXPECT_EQ(t.to_vector(), expected);
}

TEST(TensorTest, CopyFromStridedIntoStrided) {
  Tensor a = indexed_matrix(3, 4);
  Tensor b = Tensor::zeros({3, 7});
  b.slice(-1, 4, 3).copy_from(a.slice(-1, 0, 3));
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(b(i, j), j >= 4 ? a(i, j - 4) : 0.0f);
  }
}

TEST(TensorTest, CopyFromThreeDimensionalMiddleSlice) {
  // Slicing the middle dim of a 3-d tensor walks two outer indices per row.
  Tensor t = Tensor::from_vector({2, 4, 3}, iota(24));
  Tensor dst = Tensor::zeros({2, 2, 3});
  dst.copy_from(t.slice(1, 1, 2));
  EXPECT_EQ(dst.to_vector(), (std::vector<float>{3, 4, 5, 6, 7, 8, 15, 16, 17, 18, 19, 20}));
  Tensor last = Tensor::zeros({2, 4, 1});
  last.copy_from(t.slice(-1, 2, 1));
  EXPECT_EQ(last.to_vector(), (std::vector<float>{2, 5, 8, 11, 14, 17, 20, 23}));
}

TEST(TensorTest, CopyFromShapeMismatchThrows) {
  Tensor dst = Tensor::zeros({2, 3});
  EXPECT_THROW(dst.copy_from(Tensor::zeros({3, 2})), InternalError);
  EXPECT_THROW(dst.copy_from(Tensor::zeros({6})), InternalError);
  EXPECT_THROW(dst.copy_from(Tensor::zeros({2, 4}).slice(-1, 0, 2)), InternalError);
}

TEST(TensorTest, FillAndZero) {
  Tensor t = Tensor::from_vector({2, 2}, iota(4));
  t.fill(3.0f);
  EXPECT_EQ(t.to_vector(), std::vector<float>(4, 3.0f));
  t.zero();
  EXPECT_EQ(t.to_vector(), std::vector<float>(4, 0.0f));
}

TEST(TensorTest, EnsureShapeReallocatesOnlyOnShapeChange) {
  Tensor t;
  ensure_shape(t, {3, 4}, Device::cpu());
  EXPECT_TRUE(t.owns_storage());
  EXPECT_EQ(t.shape(), (Shape{3, 4}));
  t.fill(7.0f);
  const float* first = t.data();
  // Same shape: same buffer, contents untouched.
  ensure_shape(t, {3, 4}, Device::cpu());
  EXPECT_EQ(t.data(), first);
  EXPECT_EQ(t(2, 3), 7.0f);
  // New shape: a new contiguous buffer of that shape.
  ensure_shape(t, {4, 3}, Device::cpu());
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(t.owns_storage());
}

TEST(TensorTest, EnsureShapeReplacesViews) {
  // A wrapped buffer is not the tensor's own: ensure_shape must not write into it
  // later, so it allocates even though the shape matches.
  std::vector<float> buffer(6, 1.0f);
  Tensor w = Tensor::wrap(buffer.data(), {2, 3});
  ensure_shape(w, {2, 3}, Device::cpu());
  EXPECT_TRUE(w.owns_storage());
  EXPECT_NE(w.data(), buffer.data());
  // A strided column block of the right shape is replaced by a contiguous buffer.
  Tensor parent = Tensor::zeros({2, 6});
  Tensor block = parent.slice(-1, 0, 3);
  ensure_shape(block, {2, 3}, Device::cpu());
  EXPECT_TRUE(block.is_contiguous());
  EXPECT_NE(block.data(), parent.data());
}

TEST(TensorTest, Bf16TensorsHoldTwoBytesPerElement) {
  Tensor t = Tensor::empty({3, 5}, Device::cpu(), DType::kBF16);
  EXPECT_EQ(t.dtype(), DType::kBF16);
  EXPECT_EQ(t.bytes(), 3 * 5 * 2);
  EXPECT_EQ(dtype_bytes(DType::kF32), 4);
  EXPECT_EQ(dtype_bytes(DType::kBF16), 2);
  EXPECT_STREQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_STREQ(dtype_name(DType::kF32), "fp32");
  // A column slice starts 2 bytes per element further on.
  uint16_t* bits = t.bf16_data();
  for (int i = 0; i < 15; ++i) bits[i] = static_cast<uint16_t>(0x3f80 + i);  // 1, 1 + 2^-7, ...
  Tensor column = t.slice(-1, 2, 2);
  EXPECT_EQ(static_cast<const char*>(column.raw_data()) - static_cast<const char*>(t.raw_data()),
            4);
  EXPECT_EQ(column.bf16_data()[0], 0x3f82);
  // Strided copy into a contiguous bf16 tensor moves the bits, row by row.
  Tensor dst = Tensor::empty({3, 2}, Device::cpu(), DType::kBF16);
  dst.copy_from(column);
  const uint16_t expected[] = {0x3f82, 0x3f83, 0x3f87, 0x3f88, 0x3f8c, 0x3f8d};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(dst.bf16_data()[i], expected[i]);
  // to_vector widens exactly; clone keeps the dtype.
  const std::vector<float> values = dst.clone().to_vector();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[i], bf16_to_float(expected[i]));
  EXPECT_EQ(dst.clone().dtype(), DType::kBF16);
}

TEST(TensorTest, Bf16FillRoundsToNearestEven) {
  Tensor t = Tensor::zeros({2, 3}, Device::cpu());
  Tensor h = Tensor::empty({2, 3}, Device::cpu(), DType::kBF16);
  h.fill(1.0f + 0x1p-8f);  // a tie: rounds to 1
  EXPECT_EQ(h.to_vector(), std::vector<float>(6, 1.0f));
  h.slice(-1, 1, 1).fill(0.1f);
  EXPECT_EQ(h.to_vector()[4], bf16_to_float(float_to_bf16(0.1f)));
  EXPECT_NE(h.to_vector()[4], 0.1f);
  h.zero();
  EXPECT_EQ(h.to_vector(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(t.to_vector(), std::vector<float>(6, 0.0f));
}

TEST(TensorTest, DtypesDoNotMix) {
  Tensor f = Tensor::zeros({2, 2});
  Tensor h = Tensor::zeros({2, 2}, Device::cpu(), DType::kBF16);
  EXPECT_THROW(h.data(), InternalError);
  EXPECT_THROW(f.bf16_data(), InternalError);
  EXPECT_THROW(h.copy_from(f), InternalError);
  EXPECT_THROW(f.copy_from(h), InternalError);
  // ensure_shape reallocates when only the dtype differs.
  ensure_shape(f, {2, 2}, Device::cpu(), DType::kBF16);
  EXPECT_EQ(f.dtype(), DType::kBF16);
  EXPECT_EQ(f.bytes(), 8);
}

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(gen);
  return v;
}

TEST(TensorTest, ConvertToBf16RoundsEachElement) {
  for (int64_t n : {1, 7, 1000, 300001}) {  // the last one runs in parallel
    std::vector<float> v = random_values(n, static_cast<uint32_t>(n));
    v[0] = 1.0f + 0x1p-8f;  // a tie
    if (n > 4) {
      v[1] = std::numeric_limits<float>::quiet_NaN();
      v[2] = -std::numeric_limits<float>::infinity();
      v[3] = std::numeric_limits<float>::max();  // overflows to infinity
    }
    const Tensor src = Tensor::from_vector({n}, v);
    Tensor dst = Tensor::empty({n}, Device::cpu(), DType::kBF16);
    dst.convert_from(src);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(dst.bf16_data()[i], float_to_bf16(v[i])) << "n " << n << " i " << i;
    }
    EXPECT_EQ(bf16_to_float(dst.bf16_data()[0]), 1.0f);
  }
}

TEST(TensorTest, ConvertRoundTripIsExactForBf16Values) {
  const int64_t n = 4099;
  std::vector<float> v = random_values(n, 11);
  for (float& x : v) x = bf16_to_float(float_to_bf16(x));  // bf16-exact
  const Tensor src = Tensor::from_vector({n}, v);
  Tensor half = Tensor::empty({n}, Device::cpu(), DType::kBF16);
  Tensor back = Tensor::empty({n});
  half.convert_from(src);
  back.convert_from(half);
  ASSERT_EQ(std::memcmp(back.data(), src.data(), static_cast<size_t>(src.bytes())), 0);
}

TEST(TensorTest, ConvertInTheSameDtypeCopies) {
  const Tensor src = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor dst = Tensor::zeros({2, 3});
  dst.convert_from(src);
  EXPECT_EQ(dst.to_vector(), src.to_vector());
}

TEST(TensorTest, ConvertShapeAndContiguityErrors) {
  const Tensor src = Tensor::zeros({4, 6});
  Tensor wrong = Tensor::empty({6, 4}, Device::cpu(), DType::kBF16);
  EXPECT_THROW(wrong.convert_from(src), InternalError);
  Tensor wide = Tensor::empty({4, 12}, Device::cpu(), DType::kBF16);
  Tensor block = wide.slice(1, 0, 6);
  EXPECT_THROW(block.convert_from(src), InternalError);
}

}  // namespace
}  // namespace colrow
