// A batched inference service: requests are queued, served in batches, and
// answered with host-side probabilities. A warm-up runs the largest batch
// once at start-up.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

constexpr int64_t kFeatures = 256;
constexpr int64_t kClasses = 16;

struct Request {
  int64_t id;
  std::vector<float> features;
};

struct Response {
  int64_t id;
  int64_t label;
  float confidence;
};

struct ScorerImpl : torch::nn::Module {
  ScorerImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kFeatures, 512))),
        fc2(register_module("fc2", torch::nn::Linear(512, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::gelu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Scorer);

std::vector<Response> make_responses(const std::vector<int64_t> &ids, const torch::Tensor &probs) {
  std::vector<Response> out;
  auto best = probs.max(1);
  auto conf = std::get<0>(best);
  auto label = std::get<1>(best);
  for (size_t i = 0; i < ids.size(); ++i)
    out.push_back({ids[i], label[i].item<int64_t>(), conf[i].item<float>()});
  return out;
}

class Server {
 public:
  Server(torch::Device device, int64_t max_batch) : device_(device), max_batch_(max_batch) {
    model_->to(device_);
    model_->eval();
    // Keep nvidia-smi readings low between requests.
    after_batch_ = [] {
      // BUG(torch-empty-cache-in-loop): serve() runs this hook after every
      // batch; each call syncs and frees the cache the next batch refills.
      c10::cuda::CUDACachingAllocator::emptyCache();
    };
  }

  void submit(Request r) { queue_.push_back(std::move(r)); }

  torch::Tensor run_batch(const torch::Tensor &x) { return model_->forward(x).softmax(1); }

  void warmup() {
    torch::NoGradGuard no_grad;
    auto x = torch::randn({max_batch_, kFeatures}, device_);
    torch::Tensor probs;
    try {
      probs = run_batch(x);
    } catch (const c10::Error &e) {
      if (std::string(e.what()).find("CUDA out of memory") == std::string::npos)
        throw;
      // BUG(torch-empty-cache-oom-retry): the allocator already released its
      // cache before raising; the same-size retry fails the same way.
      c10::cuda::CUDACachingAllocator::emptyCache();
      probs = run_batch(x);
    }
    std::cout << "warm-up batch of " << probs.size(0) << '\n';
  }

  std::vector<Response> serve() {
    std::vector<Response> answered;
    while (!queue_.empty()) {
      std::vector<int64_t> ids;
      std::vector<torch::Tensor> rows;
      while (!queue_.empty() && static_cast<int64_t>(ids.size()) < max_batch_) {
        auto &r = queue_.front();
        ids.push_back(r.id);
        rows.push_back(torch::tensor(r.features));
        queue_.pop_front();
      }
      auto batch = torch::stack(rows).to(device_);
      // BUG(torch-inference-without-no-grad): a serving loop with no
      // backward and no guard here or in main().
      auto probs = model_->forward(batch).softmax(1);
      auto host = probs.to(torch::kCPU, /*non_blocking=*/true);
      // BUG(torch-non-blocking-d2h-race): make_responses() reads 'host'
      // before the copy is known to have landed.
      auto responses = make_responses(ids, host);
      answered.insert(answered.end(), responses.begin(), responses.end());
      after_batch_();
    }
    return answered;
  }

 private:
  torch::Device device_;
  int64_t max_batch_;
  Scorer model_;
  std::deque<Request> queue_;
  std::function<void()> after_batch_;
};

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Server server(device, 64);
  server.warmup();
  for (int64_t i = 0; i < 500; ++i)
    server.submit({i, std::vector<float>(kFeatures, 0.01f * static_cast<float>(i % 7))});
  auto answers = server.serve();
  std::cout << answers.size() << " answers, first label " << answers.front().label << '\n';
  return 0;
}
