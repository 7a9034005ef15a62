// Speaker diarization: an x-vector style network (dilated TDNN layers,
// statistics pooling, an embedding layer) is trained to classify the
// training speakers; each speaker is then enrolled as a centroid, and every
// speech segment of a meeting is assigned to the nearest one. Batches come
// from a helper returning a std::tuple, uploads go through an asynchronous
// helper, the per-step clean-up is chosen once and called through a function
// pointer, and the meeting pass switches on each segment's kind.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <iostream>
#include <tuple>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kMel = 40, kFrames = 200, kEmb = 128, kSpeakers = 50;

struct XVectorImpl : torch::nn::Module {
  XVectorImpl()
      : tdnn1(register_module("tdnn1", torch::nn::Conv1d(torch::nn::Conv1dOptions(kMel, 256, 5).padding(2)))),
        tdnn2(register_module("tdnn2",
                              torch::nn::Conv1d(torch::nn::Conv1dOptions(256, 256, 3).dilation(2).padding(2)))),
        embed(register_module("embed", torch::nn::Linear(512, kEmb))) {}

  torch::Tensor forward(const torch::Tensor &mel) {  // [B, kMel, T] -> [B, kEmb]
    auto h = torch::relu(tdnn2(torch::relu(tdnn1(mel))));
    return embed(torch::cat({h.mean(2), h.std(2)}, 1));
  }

  torch::nn::Conv1d tdnn1, tdnn2;
  torch::nn::Linear embed;
};
TORCH_MODULE(XVector);

enum class SegKind { Silence, Speech, Overlap };
struct Segment {
  SegKind kind;
  torch::Tensor mel;  // [1, kMel, T]
};

// Log-mel features, speaker ids and a per-utterance SNR in dB.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> make_batch(int64_t b, const torch::Tensor &profiles) {
  auto spk = torch::randint(0, kSpeakers, {b}, torch::TensorOptions().dtype(torch::kLong));
  auto mel = torch::randn({b, kMel, kFrames});
  mel.add_(profiles.index_select(0, spk).unsqueeze(2));
  auto snr_db = torch::rand({b}) * 20.0;
  return {mel, spk, snr_db};
}

torch::Tensor upload_async(const torch::Tensor &host, torch::Device device) {
  return host.to(device, /*non_blocking=*/true);
}

void release_cached_blocks() {
  // BUG(torch-empty-cache-in-loop): the training loop calls this through
  // `after_step` on every step.
  c10::cuda::CUDACachingAllocator::emptyCache();
}

void wait_for_device(torch::Device device) {
  if (device.is_cuda())
    torch::cuda::synchronize();
}

torch::Tensor enroll(XVector &xvec, const torch::Tensor &profiles, torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> centroids;
  for (int64_t s = 0; s < kSpeakers; ++s) {
    auto mel = (torch::randn({8, kMel, kFrames}) + profiles[s].view({1, kMel, 1})).pin_memory();
    // OK(torch-non-blocking-pageable): the enrollment features are pinned.
    auto x = upload_async(mel, device);
    // OK(torch-inference-without-no-grad): the guard covers the loop.
    centroids.push_back(F::normalize(xvec->forward(x).mean(0, /*keepdim=*/true), F::NormalizeFuncOptions().dim(1)));
  }
  return torch::cat(centroids);
}

std::vector<int64_t> diarize(XVector &xvec, const std::vector<Segment> &meeting, const torch::Tensor &centroids,
                             torch::Device device) {
  std::vector<int64_t> labels;
  for (auto it = meeting.cbegin(); it != meeting.cend(); ++it) {
    switch (it->kind) {
    case SegKind::Silence:
      labels.push_back(-1);
      break;
    case SegKind::Overlap:  // scored like speech: the dominant speaker wins
    case SegKind::Speech: {
      // BUG(torch-inference-without-no-grad): the meeting loop never calls
      // backward and holds no guard; only argmax indices leave it.
      auto emb = F::normalize(xvec->forward(it->mel.to(device)), F::NormalizeFuncOptions().dim(1));
      labels.push_back(emb.matmul(centroids.t()).argmax(1).item<int64_t>());
      break;
    }
    }
  }
  return labels;
}

int main() {
  torch::manual_seed(31);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto profiles = torch::randn({kSpeakers, kMel}) * 2.0;

  XVector xvec;
  torch::nn::Linear head(kEmb, kSpeakers);
  xvec->to(device);
  head->to(device);
  auto params = xvec->parameters();
  for (auto &p : head->parameters())
    params.push_back(p);
  torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-3));

  using Cleanup = void (*)();
  const Cleanup after_step = &release_cached_blocks;
  for (int64_t step = 0; step < 3000; ++step) {
    auto [mel, spk, snr_db] = make_batch(64, profiles);
    // BUG(torch-non-blocking-pageable): make_batch() builds the features in
    // ordinary host memory; the "asynchronous" upload is synchronous.
    auto x = upload_async(mel, device);
    auto logits = head->forward(xvec->forward(x));
    auto per_utt = F::cross_entropy(logits, spk.to(device), F::CrossEntropyFuncOptions().reduction(torch::kNone));
    auto loss = (per_utt * (snr_db / 20.0).to(device)).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    after_step();
    if (step % 500 == 0)
      // OK(torch-host-sync-in-loop): logged every 500 steps.
      std::cout << "step " << step << " loss " << loss.item<float>() << "\n";
  }

  auto centroids = enroll(xvec, profiles, device);

  std::vector<Segment> meeting;
  for (int i = 0; i < 40; ++i) {
    const SegKind kind = i % 5 == 0 ? SegKind::Silence : (i % 7 == 0 ? SegKind::Overlap : SegKind::Speech);
    auto mel = torch::randn({1, kMel, kFrames}) + profiles[(i / 4) % kSpeakers].view({1, kMel, 1});
    meeting.push_back({kind, mel});
  }
  auto labels = diarize(xvec, meeting, centroids, device);
  std::cout << "first segment speaker " << labels[1] << " of " << labels.size() << " segments\n";

  // Confusable speakers: the three nearest other centroids of each one.
  torch::NoGradGuard no_grad;
  auto sim = centroids.matmul(centroids.t()) - 2.0 * torch::eye(kSpeakers, centroids.options());
  auto [top_sim, top_idx] = sim.topk(3, 1);
  auto idx_host = top_idx.to(torch::kCPU, /*non_blocking=*/true);
  auto sim_host = top_sim.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the indices are read while their copy
  // back may still be in flight.
  auto nearest = idx_host.accessor<int64_t, 2>();
  wait_for_device(device);
  // OK(torch-non-blocking-d2h-race): wait_for_device() synchronised first.
  auto closeness = sim_host.accessor<float, 2>();
  for (int64_t s = 0; s < 3; ++s)
    std::cout << "speaker " << s << " ~ " << nearest[s][0] << " (" << closeness[s][0] << ")\n";
  return 0;
}
