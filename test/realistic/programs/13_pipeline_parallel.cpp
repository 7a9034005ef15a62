// Pipeline (model) parallelism over two GPUs: a transformer-ish block stack
// split in two stages. A naive benchmark version and the production one.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>

struct StageDevices {
  torch::Device first;
  torch::Device second;
};

StageDevices checked_devices() {
  TORCH_CHECK(torch::cuda::device_count() >= 2, "the pipeline needs two visible GPUs");
  // OK(torch-device-index-unchecked): device_count() >= 2 was checked above.
  return {torch::Device(torch::kCUDA, 0), torch::Device(torch::kCUDA, 1)};
}

torch::nn::Sequential make_stage(int64_t width, int64_t depth) {
  torch::nn::Sequential stage;
  for (int64_t i = 0; i < depth; ++i) {
    stage->push_back(torch::nn::Linear(width, width));
    stage->push_back(torch::nn::GELU());
  }
  return stage;
}

// A quick benchmark someone wrote on a two-GPU workstation.
class NaivePipeline {
 public:
  explicit NaivePipeline(int64_t width)
      : dev0_(torch::kCUDA, 0),
        // BUG(torch-device-index-unchecked): ordinal 1 is never compared with
        // device_count() on this path.
        dev1_(torch::kCUDA, 1),
        stage0_(make_stage(width, 4)),
        stage1_(make_stage(width, 4)) {
    stage0_->to(dev0_);
    stage1_->to(dev1_);
  }

  torch::Tensor forward(const torch::Tensor &x) {
    auto h = stage0_->forward(x.to(dev0_));
    // BUG(torch-device-mismatch): 'h' is on cuda:0 and stage1_'s parameters
    // are on cuda:1; the activation is never moved between the stages.
    return stage1_->forward(h);
  }

  std::vector<torch::Tensor> parameters() {
    auto p = stage0_->parameters();
    for (auto &q : stage1_->parameters())
      p.push_back(q);
    return p;
  }

  torch::Device output_device() const { return dev1_; }

 private:
  torch::Device dev0_, dev1_;
  torch::nn::Sequential stage0_, stage1_;
};

class Pipeline {
 public:
  Pipeline(int64_t width, StageDevices devices)
      : devices_(devices), stage0_(make_stage(width, 4)), stage1_(make_stage(width, 4)) {
    stage0_->to(devices_.first);
    stage1_->to(devices_.second);
  }

  torch::Tensor forward(const torch::Tensor &x) {
    auto h = stage0_->forward(x.to(devices_.first));
    // OK(torch-device-mismatch): the activation follows the stage.
    return stage1_->forward(h.to(devices_.second));
  }

  std::vector<torch::Tensor> parameters() {
    auto p = stage0_->parameters();
    for (auto &q : stage1_->parameters())
      p.push_back(q);
    return p;
  }

  torch::Device output_device() const { return devices_.second; }

 private:
  StageDevices devices_;
  torch::nn::Sequential stage0_, stage1_;
};

template <typename Model>
void train(Model &model, torch::Device out_device, int64_t width, int64_t steps) {
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(1e-2));
  for (int64_t step = 0; step < steps; ++step) {
    auto x = torch::randn({32, width});
    auto y = torch::randn({32, width}, out_device);
    auto loss = torch::mse_loss(model.forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

int main(int argc, char **argv) {
  if (!torch::cuda::is_available())
    return 0;
  const int64_t width = 1024;
  if (argc > 1) {
    NaivePipeline bench(width);
    train(bench, bench.output_device(), width, 10);
    return 0;
  }
  Pipeline pipeline(width, checked_devices());
  train(pipeline, pipeline.output_device(), width, 1000);
  std::cout << "done\n";
  return 0;
}
