// Where a check could read a system header's function body through a call
// from user code (docs/driver.md, "What is skipped"): the findings must be
// the same with the bodies skipped.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <vision/tiny.h>
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

torch::Tensor train_step(const torch::Tensor &batch);
std::vector<torch::Tensor> load_batches();

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

// ExprMutationAnalyzer follows `batch` into emplace_back (a forwarding
// template of the standard library): it is not changed, so this is a retry
// at the same size.
void retry_after_keeping_it(torch::Tensor batch,
                            std::vector<torch::Tensor> &seen) {
  try {
    train_step(batch);
  } catch (const c10::OutOfMemoryError &) {
    seen.emplace_back(batch);
    auto pair = std::make_pair(batch, 1);
    c10::cuda::CUDACachingAllocator::emptyCache();
    train_step(batch);
  }
}

// A call into a library outside LibTorch's and the standard library's
// namespaces is opaque to the training-loop analysis, body or not: only
// user code gets a summary.
void evaluate(Net &net) {
  for (const auto &x : load_batches()) {
    auto y = net->forward(x);
    vision::log_tensor(y);
  }
}

// A module whose constructor moves it is not on the CPU when fresh.
void fresh_module_that_moves_itself() {
  vision::Tiny tiny;
  auto x = torch::ones({2}).cuda();
  auto y = tiny->forward(x);
  torch::nn::Moving2d moving;
  auto z = moving->forward(x);
  (void)y;
  (void)z;
}

// The same for a module template of the user's: its constructor is
// instantiated through the holder's members.
template <int N> struct UserMovingImpl : torch::nn::Module {
  UserMovingImpl() { to(torch::kCUDA); }
  torch::Tensor forward(torch::Tensor x) { return x; }
};
using UserMoving2Impl = UserMovingImpl<2>;
TORCH_MODULE(UserMoving2);
void fresh_template_module_of_the_user() {
  UserMoving2 net;
  auto x = torch::ones({2}).cuda();
  auto y = net->forward(x);
  (void)y;
}

// Generic lambdas instantiated inside standard algorithms.
void in_algorithms(std::vector<torch::Tensor> &ts, int n) {
  std::for_each(ts.begin(), ts.end(), [](auto &t) { t.cuda(); });
  std::for_each(ts.begin(), ts.end(), [n](auto &t) {
    for (int i = 0; i < n; ++i)
      c10::cuda::CUDACachingAllocator::emptyCache();
  });
  auto shared = std::make_shared<torch::Tensor>(ts.front());
  shared->cuda();
}
