// bench corpus: batched inference with InferenceMode, a saved module, and
// results copied back to the host.
#include <torch/torch.h>

#include <iostream>
#include <string>
#include <vector>

struct EncoderImpl : torch::nn::Module {
  EncoderImpl(int64_t vocab, int64_t dim)
      : embed(register_module("embed", torch::nn::Embedding(vocab, dim))),
        rnn(register_module("rnn", torch::nn::GRU(torch::nn::GRUOptions(dim, dim).batch_first(true)))),
        head(register_module("head", torch::nn::Linear(dim, 2))) {}

  torch::Tensor forward(torch::Tensor tokens) {
    auto out = std::get<0>(rnn(embed(tokens)));
    return torch::softmax(head(out.select(1, -1)), /*dim=*/1);
  }

  torch::nn::Embedding embed;
  torch::nn::GRU rnn;
  torch::nn::Linear head;
};
TORCH_MODULE(Encoder);

std::vector<torch::Tensor> make_batches(int64_t n, int64_t batch, int64_t len) {
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < n; i += batch)
    out.push_back(torch::randint(0, 1000, {batch, len}, torch::kLong));
  return out;
}

int main(int argc, char **argv) {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Encoder encoder(1000, 64);
  if (argc > 1)
    torch::load(encoder, std::string(argv[1]));
  encoder->to(device);
  encoder->eval();

  c10::InferenceMode guard;
  std::vector<float> positive;
  for (const auto &tokens : make_batches(1024, 32, 20)) {
    auto probs = encoder->forward(tokens.to(device)).to(torch::kCPU);
    auto acc = probs.accessor<float, 2>();
    for (int64_t i = 0; i < acc.size(0); ++i)
      positive.push_back(acc[i][1]);
  }
  std::cout << positive.size() << " scored\n";
}
