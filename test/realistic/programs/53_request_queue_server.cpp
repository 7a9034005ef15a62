// An image-tagging service: requests (a 3x64x64 image as bytes plus an id)
// wait in a queue; the server drains it in micro-batches, normalises them,
// runs the tagger and answers each request with its top class and score.
// Options come from a struct with defaulted members.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

struct ServerOptions {
  // BUG(torch-device-index-unchecked): the default asks for the second GPU;
  // nothing compares it with torch::cuda::device_count().
  std::string device = "cuda:1";
  bool force_cpu = false;
  int64_t max_batch = 32;
  int64_t classes = 100;
};

struct Request {
  int64_t id;
  std::vector<uint8_t> pixels;  // 3 x 64 x 64, channel-major
};

struct Reply {
  int64_t id;
  int64_t label;
  float score;
};

struct TaggerImpl : torch::nn::Module {
  explicit TaggerImpl(int64_t classes)
      : features(register_module(
            "features", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).stride(2)),
                                              torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                                              torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1))))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        head(register_module("head", torch::nn::Linear(32, classes))) {}
  torch::Tensor forward(torch::Tensor x) { return head(drop(features->forward(x).flatten(1))); }
  torch::nn::Sequential features;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};
TORCH_MODULE(Tagger);

torch::Device make_device(const ServerOptions &opts) {
  if (opts.force_cpu || !torch::cuda::is_available()) return torch::Device(torch::kCPU);
  // OK(torch-cuda-unguarded): returned above when CUDA is missing.
  return torch::Device(opts.device);
}

class Server {
 public:
  explicit Server(const ServerOptions &opts)
      : opts_(opts), device_(make_device(opts)), tagger_(opts.classes),
        mean_(torch::tensor({0.485, 0.456, 0.406}).view({1, 3, 1, 1})),
        std_(torch::tensor({0.229, 0.224, 0.225}).view({1, 3, 1, 1})) {
    tagger_->to(device_);
    tagger_->eval();
  }

  void submit(Request r) { queue_.push_back(std::move(r)); }

  // Runs once at start-up, before the queue is served.
  void warm_up() {
    torch::NoGradGuard no_grad;
    auto dummy = torch::zeros({opts_.max_batch, 3, 64, 64}, device_);
    try {
      tagger_->forward(dummy);
    } catch (const c10::OutOfMemoryError &) {
      // BUG(torch-empty-cache-oom-retry): the same dummy batch is run again
      // at the same size.
      c10::cuda::CUDACachingAllocator::emptyCache();
      tagger_->forward(dummy);
    }
  }

  std::vector<Reply> drain() {
    std::vector<Reply> replies;
    while (!queue_.empty()) {
      std::vector<int64_t> ids;
      std::vector<torch::Tensor> images;
      while (!queue_.empty() && static_cast<int64_t>(images.size()) < opts_.max_batch) {
        Request &r = queue_.front();
        auto img = torch::from_blob(r.pixels.data(), {3, 64, 64}, torch::kUInt8).to(torch::kFloat).div(255.0);
        images.push_back(img.clone());
        ids.push_back(r.id);
        queue_.pop_front();
      }
      auto batch = torch::stack(images).to(device_);
      // BUG(torch-device-mismatch): 'mean_' and 'std_' were made on the host in
      // the constructor; the batch is on the server's device.
      auto x = (batch - mean_) / std_;
      // BUG(torch-inference-without-no-grad): the serving loop never runs
      // backward and holds no guard; autograd records every batch.
      auto logits = tagger_->forward(x);
      auto best = torch::softmax(logits, 1).max(1);
      auto scores = std::get<0>(best).to(torch::kCPU, /*non_blocking=*/true);
      auto labels = std::get<1>(best).to(torch::kCPU);
      // OK(torch-non-blocking-d2h-race): the blocking copy of 'labels' above
      // waited for the stream, 'scores' included.
      auto s = scores.accessor<float, 1>();
      auto l = labels.accessor<int64_t, 1>();
      for (size_t i = 0; i < ids.size(); ++i) replies.push_back({ids[i], l[i], s[i]});
    }
    return replies;
  }

  // Answers one urgent request without queueing it.
  Reply answer_now(const Request &r) {
    c10::InferenceMode guard;
    auto img = torch::from_blob(const_cast<uint8_t *>(r.pixels.data()), {1, 3, 64, 64}, torch::kUInt8);
    // OK(torch-device-mismatch): the image and the statistics are both on the
    // host here; only the normalised batch is moved.
    auto x = (img.to(torch::kFloat).div(255.0) - mean_) / std_;
    auto logits = tagger_->forward(x.to(device_));
    auto probs = torch::softmax(logits, 1).to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the asynchronous copy has not
    // necessarily landed when the scores are read.
    const float *p = probs.data_ptr<float>();
    const int64_t label = std::max_element(p, p + opts_.classes) - p;
    return {r.id, label, p[label]};
  }

 private:
  ServerOptions opts_;
  torch::Device device_;
  Tagger tagger_;
  torch::Tensor mean_, std_;
  std::deque<Request> queue_;
};

int main(int argc, char **argv) {
  ServerOptions opts;
  if (argc > 1 && std::string(argv[1]) == "--cpu") opts.force_cpu = true;
  Server server(opts);
  server.warm_up();
  for (int64_t id = 0; id < 100; ++id) {
    auto noise = torch::randint(0, 256, {3 * 64 * 64}, torch::kUInt8);
    Request r{id, std::vector<uint8_t>(noise.data_ptr<uint8_t>(), noise.data_ptr<uint8_t>() + noise.numel())};
    server.submit(std::move(r));
  }
  for (const Reply &reply : server.drain())
    if (reply.id % 25 == 0) std::cout << reply.id << ": class " << reply.label << " (" << reply.score << ")\n";
  Request urgent{1000, std::vector<uint8_t>(3 * 64 * 64, 128)};
  std::cout << "urgent: class " << server.answer_now(urgent).label << '\n';
  return 0;
}
