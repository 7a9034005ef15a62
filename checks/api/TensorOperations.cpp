//===--- TensorOperations.cpp - torch-tidy --------------------------------===//
//
// What LibTorch's tensor operations do: which combine several tensors,
// which compute element-wise, which return views, indices or no graph.
//
//===----------------------------------------------------------------------===//

#include "api/TorchApi.h"
#include "clang/AST/Decl.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"

namespace clang::tidy::torch {

bool isLossFunction(const FunctionDecl &FD) {
  if (!FD.getIdentifier() || !isTorchNamespaceDecl(FD))
    return false;
  llvm::StringRef N = FD.getName();
  return N.ends_with("_loss") || N == "cross_entropy" ||
         N == "binary_cross_entropy" ||
         N == "binary_cross_entropy_with_logits" || N == "kl_div";
}

bool isMultiTensorFunction(const FunctionDecl &FD) {
  // With the element-wise ones (isElementwiseOfTwo) and the losses.
  static const llvm::StringSet<> Names = {
      "cat",          "concat",       "stack",      "hstack",
      "vstack",       "matmul",       "mm",         "bmm",
      "addmm",        "dot",          "mv",         "einsum",
      "linear",       "conv1d",       "conv2d",     "conv3d",
      "stft",         "istft",        "index_select", "gather",
      "bilinear",     "cdist",        "cosine_similarity", "pairwise_distance",
      "batch_norm",   "layer_norm",   "group_norm", "embedding",
      "conv_transpose1d", "conv_transpose2d", "grid_sample", "masked_select",
      "scatter",      "scatter_add",  "allclose",   "equal",
      "cross",        "dist"};
  if (isa<CXXMethodDecl>(FD) || !FD.getIdentifier() ||
      !isTorchNamespaceDecl(FD))
    return false;
  return Names.contains(FD.getName()) || isElementwiseOfTwo(FD.getName()) ||
         isLossFunction(FD);
}

bool isElementwiseOfTwo(llvm::StringRef N) {
  static const llvm::StringSet<> Names = {
      "add",         "sub",        "mul",         "div",         "where",
      "eq",          "ne",         "lt",          "gt",          "le",
      "ge",          "pow",        "maximum",     "minimum",     "fmod",
      "remainder",   "atan2",      "logical_and", "logical_or",  "logical_xor",
      "bitwise_and", "bitwise_or", "bitwise_xor", "masked_fill", "lerp",
      "addcmul",     "addcdiv",    "isclose",     "hypot",       "copysign"};
  return Names.contains(N);
}

bool isViewMethod(llvm::StringRef Method) {
  return llvm::StringSwitch<bool>(Method)
      .Cases("slice", "narrow", "view", "view_as", "select", "transpose", true)
      .Cases("t", "squeeze", "unsqueeze", "expand", "expand_as", true)
      .Cases("permute", "diagonal", "unfold", "as_strided", "alias", true)
      .Cases("movedim", "swapaxes", "real", "imag", true)
      .Default(false);
}

bool returnsNoGraph(llvm::StringRef Name) {
  return llvm::StringSwitch<bool>(Name)
      .Cases("argmax", "argmin", "argsort", "argwhere", "nonzero", true)
      .Cases("eq", "ne", "gt", "lt", "ge", "le", true)
      .Cases("greater", "less", "equal", "not_equal", "isclose", true)
      .Cases("isnan", "isinf", "isfinite", "isneginf", "isposinf", true)
      .Cases("logical_and", "logical_or", "logical_not", "logical_xor", true)
      .Cases("any", "all", "count_nonzero", "bucketize", "searchsorted", true)
      .Cases("bincount", "histc", "one_hot", "sign", "signbit", true)
      .Default(false);
}

bool isElementwiseFunction(llvm::StringRef Name) {
  return llvm::StringSwitch<bool>(Name)
      .Cases("abs", "neg", "exp", "exp2", "expm1", "log", "log2", true)
      .Cases("log10", "log1p", "sqrt", "rsqrt", "square", "pow", true)
      .Cases("sin", "cos", "tan", "tanh", "sigmoid", "relu", "gelu", true)
      .Cases("silu", "elu", "leaky_relu", "softplus", "clamp", "clip", true)
      .Cases("floor", "ceil", "round", "trunc", "reciprocal", "erf", true)
      .Cases("softmax", "log_softmax", "dropout", "nan_to_num", true)
      .Default(false);
}

bool isPointwise(llvm::StringRef Name) {
  return isElementwiseFunction(Name) || isElementwiseOfTwo(Name);
}

std::optional<unsigned> joinedRank(llvm::StringRef Name, unsigned Operands) {
  if (Name == "stack")
    return Operands + 1;
  if (llvm::is_contained({"cat", "concat", "concatenate", "hstack", "vstack",
                          "dstack", "column_stack"},
                         Name))
    return std::max(Operands, 1u);
  return std::nullopt;
}

bool keepsRankFunction(llvm::StringRef Name) {
  if (Name.consume_back("1d") || Name.consume_back("2d") ||
      Name.consume_back("3d"))
    return llvm::StringSwitch<bool>(Name)
        .Cases("conv", "conv_transpose", "avg_pool", "max_pool", true)
        .Cases("adaptive_avg_pool", "adaptive_max_pool", "lp_pool", true)
        .Cases("dropout", "feature_alpha_dropout", true)
        .Default(false);
  return llvm::StringSwitch<bool>(Name)
      .Cases("interpolate", "upsample", "pad", "normalize", true)
      .Cases("batch_norm", "layer_norm", "group_norm", "instance_norm", true)
      .Cases("local_response_norm", "pixel_shuffle", true)
      .Default(false);
}

bool returnsValuesAndIndices(llvm::StringRef Name) {
  return llvm::StringSwitch<bool>(Name)
      .Cases("max", "min", "topk", "sort", "kthvalue", "mode", true)
      .Cases("median", "nanmedian", "cummax", "cummin", true)
      .Default(false);
}

} // namespace clang::tidy::torch
