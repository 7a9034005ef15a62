#pragma once
#include <ATen/core/TensorBody.h>

// The ATen factories and multi-tensor functions (at::), which torch:: wraps.
namespace at {
Tensor randn(IntArrayRef size, TensorOptions options = {});
Tensor rand(IntArrayRef size, TensorOptions options = {});
Tensor zeros(IntArrayRef size, TensorOptions options = {});
Tensor ones(IntArrayRef size, TensorOptions options = {});
Tensor empty(IntArrayRef size, TensorOptions options = {},
             c10::optional<MemoryFormat> memory_format = c10::nullopt);
Tensor full(IntArrayRef size, const Scalar &fill_value, TensorOptions options = {});
Tensor arange(const Scalar &end, TensorOptions options = {});
Tensor arange(const Scalar &start, const Scalar &end, TensorOptions options = {});
Tensor eye(int64_t n, TensorOptions options = {});
Tensor linspace(const Scalar &start, const Scalar &end, int64_t steps, TensorOptions options = {});
Tensor randint(int64_t high, IntArrayRef size, TensorOptions options = {});
Tensor randint(int64_t low, int64_t high, IntArrayRef size, TensorOptions options = {});
Tensor from_blob(void *data, IntArrayRef sizes, const TensorOptions &options = {});
Tensor scalar_tensor(const Scalar &s, TensorOptions options = {});
Tensor zeros_like(const Tensor &self, TensorOptions options = {});
Tensor ones_like(const Tensor &self, TensorOptions options = {});
Tensor empty_like(const Tensor &self, TensorOptions options = {});
Tensor randn_like(const Tensor &self, TensorOptions options = {});
Tensor rand_like(const Tensor &self, TensorOptions options = {});
Tensor full_like(const Tensor &self, const Scalar &fill_value, TensorOptions options = {});

Tensor cat(TensorList tensors, int64_t dim = 0);
Tensor stack(TensorList tensors, int64_t dim = 0);
std::vector<Tensor> meshgrid(TensorList tensors, const char *indexing = "ij");
// The lengths are read on the host; the targets are moved to log_probs'.
Tensor ctc_loss(const Tensor &log_probs, const Tensor &targets,
                const Tensor &input_lengths, const Tensor &target_lengths,
                int64_t blank = 0, int64_t reduction = 1, bool zero_infinity = false);
Tensor matmul(const Tensor &self, const Tensor &other);
Tensor sparse_coo_tensor(const Tensor &indices, const Tensor &values,
                         IntArrayRef size, TensorOptions options = {});
Tensor mm(const Tensor &self, const Tensor &mat2);
Tensor bmm(const Tensor &self, const Tensor &mat2);
Tensor add(const Tensor &self, const Tensor &other, const Scalar &alpha = 1);
Tensor mul(const Tensor &self, const Tensor &other);
Tensor where(const Tensor &condition, const Tensor &self, const Tensor &other);
Tensor mse_loss(const Tensor &self, const Tensor &target, int64_t reduction = 1);
Tensor l1_loss(const Tensor &self, const Tensor &target, int64_t reduction = 1);
Tensor nll_loss(const Tensor &self, const Tensor &target);
Tensor cross_entropy_loss(const Tensor &self, const Tensor &target);
Tensor binary_cross_entropy(const Tensor &self, const Tensor &target);
Tensor relu(const Tensor &self);
Tensor dropout(const Tensor &input, double p, bool train);
Tensor log(const Tensor &self);
// The window is a c10::optional<Tensor>, as in the real header.
Tensor stft(const Tensor &self, int64_t n_fft, c10::optional<int64_t> hop_length,
            c10::optional<int64_t> win_length, const c10::optional<Tensor> &window,
            bool normalized, c10::optional<bool> onesided = c10::nullopt,
            c10::optional<bool> return_complex = c10::nullopt);
Tensor exp(const Tensor &self);
Tensor log_softmax(const Tensor &self, int64_t dim);
} // namespace at
