// Classifies static American Sign Language letters from the 21 hand
// landmarks (x, y, z per joint) that an upstream hand tracker emits. The
// trainer is a port of the pytorch/examples C++ MNIST example: a custom
// torch::data dataset, train() and test() templated on the data loader, the
// device picked once in main(), and the model placed by a free function that
// takes a torch::nn::Module&. An optional flag exports a half-precision copy
// of the weights for the phone app.
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

constexpr int64_t kJoints = 21;
constexpr int64_t kLetters = 24;  // J and Z need motion; they are not static
constexpr size_t kTrainBatchSize = 64;
constexpr size_t kTestBatchSize = 512;
constexpr size_t kNumberOfEpochs = 12;
constexpr size_t kLogInterval = 25;

class LandmarkDataset : public torch::data::datasets::Dataset<LandmarkDataset> {
 public:
  enum class Mode { kTrain, kTest };

  explicit LandmarkDataset(Mode mode) : mode_(mode) {
    const int64_t n = mode == Mode::kTrain ? 24000 : 4000;
    // Stand-in for the tracker's export: one jittered template per letter.
    auto templates = torch::randn({kLetters, kJoints, 3});
    labels_ = torch::randint(0, kLetters, {n});
    // BUG(torch-tensor-to-discarded): the labels come out of randint as
    // float; the conversion to int64 is thrown away and nll_loss rejects them.
    labels_.to(torch::kLong);
    landmarks_ = templates.index_select(0, labels_.to(torch::kLong)) + 0.05 * torch::randn({n, kJoints, 3});
    // Wrist-relative coordinates, like the tracker's "world" landmarks.
    landmarks_ = landmarks_ - landmarks_.narrow(1, 0, 1);
  }

  torch::data::Example<> get(size_t index) override {
    return {landmarks_[static_cast<int64_t>(index)], labels_[static_cast<int64_t>(index)]};
  }

  torch::optional<size_t> size() const override { return static_cast<size_t>(landmarks_.size(0)); }

  bool is_train() const noexcept { return mode_ == Mode::kTrain; }

 private:
  Mode mode_;
  torch::Tensor landmarks_, labels_;
};

struct Net : torch::nn::Module {
  Net()
      : fc1(register_module("fc1", torch::nn::Linear(kJoints * 3, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 64))),
        fc3(register_module("fc3", torch::nn::Linear(64, kLetters))),
        drop(register_module("drop", torch::nn::Dropout(0.25))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = x.view({-1, kJoints * 3});
    x = torch::relu(fc1->forward(x));
    x = drop->forward(x);
    x = torch::relu(fc2->forward(x));
    return torch::log_softmax(fc3->forward(x), /*dim=*/1);
  }

  torch::nn::Linear fc1, fc2, fc3;
  torch::nn::Dropout drop;
};

void place(torch::nn::Module &module, torch::Device device) { module.to(device); }

template <typename DataLoader>
void train(size_t epoch, Net &model, torch::Device device, DataLoader &data_loader,
           torch::optim::Optimizer &optimizer, size_t dataset_size) {
  model.train();
  size_t batch_idx = 0;
  for (auto &batch : data_loader) {
    // BUG(torch-non-blocking-pageable): batches of a torch::data loader are
    // never pinned; the "non-blocking" upload is a synchronous copy.
    auto data = batch.data.to(device, /*non_blocking=*/true);
    auto targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    // OK(torch-device-mismatch): the targets were moved with the data.
    auto loss = torch::nll_loss(output, targets);
    loss.backward();
    optimizer.step();

    if (batch_idx++ % kLogInterval == 0) {
      // OK(torch-host-sync-in-loop): only on logging steps.
      std::printf("\rTrain Epoch: %zu [%5zu/%5zu] Loss: %.4f", epoch, batch_idx * batch.data.size(0), dataset_size,
                  loss.template item<float>());
    }
  }
}

template <typename DataLoader>
void test(Net &model, torch::Device device, DataLoader &data_loader, size_t dataset_size) {
  torch::NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  for (const auto &batch : data_loader) {
    auto data = batch.data.to(device);
    auto targets = batch.target;
    auto pred = model.forward(data).argmax(1);
    // BUG(torch-device-mismatch): the targets were never moved; the
    // predictions are on `device`, the targets on the CPU.
    correct += pred.eq(targets).sum().template item<int64_t>();
  }
  std::printf("\nTest set: Accuracy: %.3f\n", static_cast<double>(correct) / static_cast<double>(dataset_size));
}

int main(int argc, char **argv) {
  torch::manual_seed(1);

  torch::DeviceType device_type;
  if (torch::cuda::is_available()) {
    std::cout << "CUDA available! Training on GPU." << std::endl;
    device_type = torch::kCUDA;
  } else {
    std::cout << "Training on CPU." << std::endl;
    device_type = torch::kCPU;
  }
  torch::Device device(device_type);

  Net model;
  place(model, device);

  auto train_dataset = LandmarkDataset(LandmarkDataset::Mode::kTrain).map(torch::data::transforms::Stack<>());
  const size_t train_dataset_size = train_dataset.size().value();
  auto train_loader =
      torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(std::move(train_dataset), kTrainBatchSize);

  auto test_dataset = LandmarkDataset(LandmarkDataset::Mode::kTest).map(torch::data::transforms::Stack<>());
  const size_t test_dataset_size = test_dataset.size().value();
  auto test_loader = torch::data::make_data_loader(std::move(test_dataset), kTestBatchSize);

  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));

  for (size_t epoch = 1; epoch <= kNumberOfEpochs; ++epoch) {
    train(epoch, model, device, *train_loader, optimizer, train_dataset_size);
    test(model, device, *test_loader, test_dataset_size);
  }

  torch::save(model.parameters(), "asl_landmarks.pt");

  if (argc > 1 && std::string(argv[1]) == "--export-half") {
    // The phone app runs fp16 weights; convert on the GPU and write them out.
    // BUG(torch-cuda-unguarded): this branch is taken on CPU-only machines
    // too, and nothing checks that CUDA exists before selecting it.
    model.to(torch::kCUDA, torch::kHalf);
    std::vector<torch::Tensor> half_weights;
    for (const auto &p : model.parameters())
      half_weights.push_back(p.cpu());
    torch::save(half_weights, "asl_landmarks_fp16.pt");
  }
  return 0;
}
