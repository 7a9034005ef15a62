// Distils a wide tabular MLP (the teacher, loaded from disk and owned
// through a std::unique_ptr) into a narrow student. The GPU ordinal comes
// from the command line. Evaluation walks a list of shards, skips the empty
// ones and stops once enough rows have been scored.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kIn = 40;
constexpr int64_t kOut = 6;

struct TeacherImpl : torch::nn::Module {
  TeacherImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kIn, 1024), torch::nn::ReLU(),
                                                         torch::nn::Dropout(0.5), torch::nn::Linear(1024, kOut)))) {}
  torch::Tensor forward(torch::Tensor x) { return net->forward(x); }
  torch::nn::Sequential net;
};

struct StudentImpl : torch::nn::Module {
  StudentImpl()
      : fc(register_module("fc", torch::nn::Linear(kIn, 32))),
        drop(register_module("drop", torch::nn::Dropout(0.1))),
        out(register_module("out", torch::nn::Linear(32, kOut))) {}
  torch::Tensor forward(torch::Tensor x) { return out(drop(torch::relu(fc(x)))); }
  torch::nn::Linear fc;
  torch::nn::Dropout drop;
  torch::nn::Linear out;
};
TORCH_MODULE(Student);

struct Shard {
  torch::Tensor x, y;
  bool empty() const { return !x.defined() || x.size(0) == 0; }
};

Shard sample(int64_t n) {
  auto x = torch::randn({n, kIn});
  auto y = x.narrow(1, 0, kOut).argmax(1);
  return {x, y};
}

std::vector<Shard> load_shards(int64_t count, int64_t rows) {
  std::vector<Shard> shards;
  for (int64_t i = 0; i < count; ++i) shards.push_back(i % 5 == 4 ? Shard{} : sample(rows));
  return shards;
}

torch::Device device_from_args(int argc, char **argv) {
  const int ordinal = argc > 1 ? std::stoi(argv[1]) : 0;
  if (!torch::cuda::is_available()) return torch::Device(torch::kCPU);
  if (ordinal < 0 || ordinal >= static_cast<int>(torch::cuda::device_count())) {
    std::cerr << "no GPU " << ordinal << ", using GPU 0\n";
    return torch::Device(torch::kCUDA, 0);
  }
  // OK(torch-device-index-unchecked, torch-cuda-unguarded): the ordinal from
  // the command line was compared with device_count() above.
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(ordinal));
}

class Distiller {
 public:
  Distiller(torch::Device device, const std::string &teacher_path)
      : device_(device), teacher_(std::make_unique<TeacherImpl>()) {
    torch::serialize::InputArchive archive;
    archive.load_from(teacher_path);
    teacher_->load(archive);
    teacher_->to(device_);
    teacher_->eval();
    student_->to(device_);
    epoch_kd_ = torch::zeros({}, device_);
  }

  void train(int64_t steps, double temperature) {
    torch::optim::Adam opt(student_->parameters(), torch::optim::AdamOptions(1e-3));
    student_->train();
    for (int64_t step = 0; step < steps; ++step) {
      auto batch = sample(256);
      auto x = batch.x.to(device_);
      auto y = batch.y.to(device_);
      torch::Tensor soft;
      {
        torch::NoGradGuard no_grad;
        soft = torch::softmax(teacher_->forward(x) / temperature, 1);
      }
      auto logits = student_->forward(x);
      auto kd = F::kl_div(F::log_softmax(logits / temperature, F::LogSoftmaxFuncOptions(1)), soft,
                          F::KLDivFuncOptions().reduction(torch::kBatchMean)) *
                (temperature * temperature);
      auto loss = 0.7 * kd + 0.3 * F::cross_entropy(logits, y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): 'epoch_kd_' is a member that
      // outlives the loop; add_() links every step's graph into it.
      epoch_kd_.add_(kd);
      // BUG(torch-host-sync-in-loop): printing a device tensor copies it to
      // the host on every step.
      std::cout << "step " << step << " loss " << loss << '\n';
      if (step % 200 == 199) {
        // OK(torch-host-sync-in-loop): read every 200 steps.
        std::cout << "mean kd " << (epoch_kd_ / 200.0).item<double>() << '\n';
        epoch_kd_ = torch::zeros({}, device_);
      }
    }
  }

  double evaluate(const std::vector<Shard> &shards, int64_t max_rows) {
    student_->eval();
    int64_t seen = 0, correct = 0;
    for (const Shard &s : shards) {
      if (s.empty()) continue;
      // BUG(torch-inference-without-no-grad): this loop never runs backward
      // and no guard is in scope.
      auto logits = student_->forward(s.x.to(device_));
      correct += logits.argmax(1).eq(s.y.to(device_)).sum().item<int64_t>();
      seen += s.x.size(0);
      if (seen >= max_rows) break;
    }
    student_->train();
    return seen == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(seen);
  }

  double teacher_agreement(const std::vector<Shard> &shards) {
    torch::NoGradGuard no_grad;
    student_->eval();
    int64_t agree = 0, seen = 0;
    for (const Shard &s : shards) {
      if (s.empty()) continue;
      auto x = s.x.to(device_);
      // OK(torch-inference-without-no-grad): under the guard above.
      auto student_top = student_->forward(x).argmax(1);
      // BUG(torch-device-mismatch): the teacher is on 'device_'; the shard's
      // features are still the host tensor, not 'x'.
      auto teacher_top = teacher_->forward(s.x).argmax(1);
      agree += student_top.eq(teacher_top.to(device_)).sum().item<int64_t>();
      seen += s.x.size(0);
    }
    student_->train();
    return seen == 0 ? 0.0 : static_cast<double>(agree) / static_cast<double>(seen);
  }

 private:
  torch::Device device_;
  std::unique_ptr<TeacherImpl> teacher_;
  Student student_;
  torch::Tensor epoch_kd_;
};

int main(int argc, char **argv) {
  const torch::Device device = device_from_args(argc, argv);
  Distiller distiller(device, argc > 2 ? argv[2] : "teacher.pt");
  distiller.train(2000, 3.0);
  const auto shards = load_shards(20, 512);
  std::cout << "student accuracy " << distiller.evaluate(shards, 4096) << '\n';
  std::cout << "teacher agreement " << distiller.teacher_agreement(shards) << '\n';
  return 0;
}
