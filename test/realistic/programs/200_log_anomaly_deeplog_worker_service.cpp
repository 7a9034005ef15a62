// DeepLog-style anomaly detection on system logs. An upstream Drain parser
// turns each log line into a template id; an LSTM reads the ids of the last
// ten lines and predicts the next one, and a line is anomalous when its
// template is not among the model's top-g candidates. The detector runs
// in-process as a DetectorService: producers submit windows per service
// (sshd, kernel, nginx, ...), a worker thread drains the queue, scores each
// request and records verdicts. Each service has a small log-prior over the
// template vocabulary, estimated from its recent traffic and kept in an
// unordered_map by service name. The model is refreshed on normal traffic
// before the service starts.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

constexpr int64_t kTemplates = 412, kWindow = 10, kEmbed = 32, kHidden = 64;

struct DeepLogImpl : torch::nn::Module {
  DeepLogImpl()
      : embed(register_module("embed", torch::nn::Embedding(kTemplates, kEmbed))),
        lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(kEmbed, kHidden).num_layers(2).batch_first(true)))),
        out(register_module("out", torch::nn::Linear(kHidden, kTemplates))) {}

  torch::Tensor forward(const torch::Tensor &ids) {  // [B, kWindow] -> [B, kTemplates]
    auto h = std::get<0>(lstm->forward(embed->forward(ids)));
    return out->forward(h.select(1, kWindow - 1));
  }

  torch::nn::Embedding embed;
  torch::nn::LSTM lstm;
  torch::nn::Linear out;
};
TORCH_MODULE(DeepLog);

struct ScoreRequest {
  std::string service;
  std::vector<std::vector<int64_t>> windows;  // kWindow template ids each
  std::vector<int64_t> observed;              // the template that followed each window
};

torch::Tensor pack_windows(const std::vector<std::vector<int64_t>> &windows) {
  auto ids = torch::empty({static_cast<int64_t>(windows.size()), kWindow}, torch::kLong);
  auto a = ids.accessor<int64_t, 2>();
  for (size_t i = 0; i < windows.size(); ++i)
    for (int64_t j = 0; j < kWindow; ++j)
      a[static_cast<int64_t>(i)][j] = windows[i][static_cast<size_t>(j)];
  return ids;
}

// Normal traffic: a few cyclic template sequences with a little noise.
std::pair<torch::Tensor, torch::Tensor> normal_traffic(int64_t n) {
  auto start = torch::randint(0, kTemplates, {n, 1}, torch::kLong);
  auto ids = (start + torch::arange(kWindow + 1, torch::kLong).view({1, -1}) * 7) % kTemplates;
  return {ids.narrow(1, 0, kWindow).contiguous(), ids.select(1, kWindow).contiguous()};
}

void refresh(DeepLog &net, torch::Device device, int64_t steps) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  net->train();
  auto running = torch::zeros({}, torch::TensorOptions().device(device));
  for (int64_t step = 0; step < steps; ++step) {
    auto [windows, next] = normal_traffic(256);
    auto loss = torch::cross_entropy_loss(net->forward(windows.to(device)), next.to(device));
    opt.zero_grad();
    loss.backward();
    opt.step();
    // OK(torch-loss-accumulation-graph, torch-host-sync-in-loop): detached, and
    // kept on the device until the loop ends.
    running += loss.detach();
  }
  std::cout << "refresh loss " << (running / steps).item<double>() << "\n";
}

class DetectorService {
 public:
  DetectorService(DeepLog net, torch::Device device, int64_t top_g, const std::vector<std::string> &services)
      : net_(std::move(net)), device_(device), top_g_(top_g) {
    net_->to(device_);
    net_->eval();
    for (const auto &name : services)
      log_prior_[name] = torch::zeros({kTemplates});
  }

  // Re-estimates a service's prior from template counts of its recent traffic.
  void calibrate(const std::string &service, const torch::Tensor &counts) {
    auto p = (counts.to(torch::kFloat) + 1.0) / (counts.sum().item<double>() + kTemplates);
    log_prior_[service] = 0.1 * torch::log(p * kTemplates);
  }

  void submit(ScoreRequest req) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(req));
    }
    cv_.notify_one();
  }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
  }

  void worker() {
    int64_t served = 0;
    while (true) {
      ScoreRequest req;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty())
          break;
        req = std::move(queue_.front());
        queue_.pop_front();
      }
      if (req.windows.empty())
        continue;

      auto ids = pack_windows(req.windows).to(device_);
      // BUG(torch-inference-without-no-grad): the worker thread starts with
      // autograd on and nothing turns it off; every request records a graph.
      auto logits = net_->forward(ids);
      if (log_prior_.count(req.service))
        // BUG(torch-device-mismatch): the priors are built on the CPU; the
        // logits are on device_.
        logits = logits + log_prior_.at(req.service);
      auto candidates = std::get<1>(logits.topk(top_g_, 1));
      auto host = candidates.to(torch::kCPU, /*non_blocking=*/true);
      auto observed = torch::tensor(req.observed, torch::kLong).unsqueeze(1);
      // BUG(torch-non-blocking-d2h-race): the candidate ids are compared on
      // the host before the copy that brings them back has finished.
      auto normal = (host == observed).any(1);
      const int64_t flagged = normal.numel() - normal.sum().item<int64_t>();
      {
        std::lock_guard<std::mutex> lock(mu_);
        anomalies_[req.service] += flagged;
      }
      if (++served % 500 == 0 && device_.is_cuda())
        // BUG(torch-empty-cache-in-loop): trimming the allocator every 500
        // requests makes the next requests cudaMalloc their blocks again.
        c10::cuda::CUDACachingAllocator::emptyCache();
    }
  }

  // Per-template anomaly probabilities for the dashboard.
  torch::Tensor surprise(const std::vector<int64_t> &window) {
    torch::NoGradGuard no_grad;
    auto probs = torch::softmax(net_->forward(pack_windows({window}).to(device_)), 1);
    auto host = probs.to(torch::kCPU, /*non_blocking=*/true);
    if (device_.is_cuda())
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised whenever the copy came off a GPU.
    std::cout << "most likely next template " << host.argmax(1).item<int64_t>() << "\n";
    return 1.0 - host;
  }

  void report() const {
    for (const auto &kv : anomalies_)
      std::cout << kv.first << ": " << kv.second << " anomalous lines\n";
  }

 private:
  DeepLog net_;
  torch::Device device_;
  int64_t top_g_;
  std::unordered_map<std::string, torch::Tensor> log_prior_;
  std::unordered_map<std::string, int64_t> anomalies_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ScoreRequest> queue_;
  bool stopping_ = false;
};

ScoreRequest synthetic_request(const std::string &service, int64_t n, bool inject) {
  auto [windows, next] = normal_traffic(n);
  if (inject)
    next.narrow(0, 0, n / 10).random_(0, kTemplates);
  ScoreRequest req;
  req.service = service;
  auto w = windows.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    req.windows.emplace_back(kWindow);
    for (int64_t j = 0; j < kWindow; ++j)
      req.windows.back()[static_cast<size_t>(j)] = w[i][j];
    req.observed.push_back(next[i].item<int64_t>());
  }
  return req;
}

int main() {
  torch::manual_seed(200);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  DeepLog net;
  net->to(device);
  refresh(net, device, 2000);

  const std::vector<std::string> services = {"sshd", "kernel", "nginx", "cron"};
  DetectorService detector(net, device, /*top_g=*/9, services);
  detector.calibrate("sshd", torch::randint(0, 50, {kTemplates}, torch::kLong));

  std::thread worker(&DetectorService::worker, &detector);
  for (int round = 0; round < 200; ++round)
    detector.submit(synthetic_request(services[static_cast<size_t>(round) % services.size()], 64, round % 7 == 0));
  detector.shutdown();
  worker.join();
  detector.report();
  auto s = detector.surprise(std::vector<int64_t>(kWindow, 3));
  std::cout << "max surprise " << s.max().item<float>() << "\n";
  return 0;
}
