// A bag-of-words text classifier: a whitespace tokenizer with a vocabulary,
// EmbeddingBag batches built from offsets, an upload helper, and an export of
// the embedding table.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

struct Vocab {
  static const torch::TensorOptions kIds;
  std::unordered_map<std::string, int64_t> index{{"<unk>", 0}};

  int64_t id(const std::string &word) {
    auto it = index.find(word);
    if (it != index.end())
      return it->second;
    int64_t next = static_cast<int64_t>(index.size());
    index.emplace(word, next);
    return next;
  }
};
const torch::TensorOptions Vocab::kIds = torch::TensorOptions().dtype(torch::kLong);

struct TextBatch {
  torch::Tensor tokens;   // flat token ids
  torch::Tensor offsets;  // start of each document
  torch::Tensor labels;
};

TextBatch encode(Vocab &vocab, const std::vector<std::pair<std::string, int64_t>> &docs) {
  std::vector<int64_t> ids, offsets, labels;
  for (const auto &doc : docs) {
    offsets.push_back(static_cast<int64_t>(ids.size()));
    std::istringstream words(doc.first);
    std::string w;
    while (words >> w)
      ids.push_back(vocab.id(w));
    labels.push_back(doc.second);
  }
  return {torch::tensor(ids, Vocab::kIds), torch::tensor(offsets, Vocab::kIds),
          torch::tensor(labels, Vocab::kIds)};
}

// Every upload in this program goes through here.
torch::Tensor to_device(const torch::Tensor &t, torch::Device device) {
  return t.to(device, /*non_blocking=*/true);
}

struct BowClassifierImpl : torch::nn::Module {
  BowClassifierImpl(int64_t vocab, int64_t dim, int64_t classes)
      : bag(register_module("bag", torch::nn::EmbeddingBag(torch::nn::EmbeddingBagOptions(vocab, dim).mode(torch::kMean)))),
        fc(register_module("fc", torch::nn::Linear(dim, classes))) {}
  torch::Tensor forward(torch::Tensor tokens, torch::Tensor offsets) {
    return fc(bag(tokens, offsets));
  }
  torch::nn::EmbeddingBag bag;
  torch::nn::Linear fc;
};
TORCH_MODULE(BowClassifier);

void save_embeddings(const torch::Tensor &weights, const std::string &path) {
  auto table = weights.detach();
  // BUG(torch-tensor-to-discarded): the host copy is discarded; 'table' is
  // saved from wherever it lives.
  table.cpu();
  torch::save(table, path);
}

std::vector<std::pair<std::string, int64_t>> corpus() {
  return {{"great movie loved it", 1}, {"terrible plot and acting", 0}, {"loved the soundtrack", 1},
          {"boring and far too long", 0}, {"a great cast", 1}, {"too long and boring", 0}};
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Vocab vocab;
  auto batch = encode(vocab, corpus());
  BowClassifier model(10000, 64, 2);
  model->to(device);
  torch::optim::Adagrad opt(model->parameters(), torch::optim::AdagradOptions(0.1));

  // BUG(torch-non-blocking-pageable): encode() builds the ids with
  // torch::tensor, pageable memory; to_device() asks for non_blocking.
  auto tokens = to_device(batch.tokens, device);
  auto offsets = batch.offsets.to(device);
  auto labels = batch.labels.to(device);
  auto staged = batch.tokens.pin_memory();
  // OK(torch-non-blocking-pageable): a pinned source through the same helper.
  auto tokens_again = to_device(staged, device);

  for (int epoch = 0; epoch < 100; ++epoch) {
    auto loss = torch::nn::functional::cross_entropy(model->forward(tokens, offsets), labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (epoch % 25 == 0)
      std::cout << "epoch " << epoch << " loss " << loss.item<double>() << '\n';
  }

  {
    // OK(torch-inference-without-no-grad): InferenceMode covers the loop.
    c10::InferenceMode guard;
    for (int repeat = 0; repeat < 3; ++repeat) {
      auto pred = model->forward(tokens_again, offsets).argmax(1);
      std::cout << "agreement " << pred.eq(labels).sum().item<int64_t>() << '\n';
    }
  }
  save_embeddings(model->bag->weight, "embeddings.pt");
  return 0;
}
