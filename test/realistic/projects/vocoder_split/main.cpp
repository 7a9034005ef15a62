// Pre-trains the vocoder, synthesizes a reference utterance, adapts to a new
// speaker.
#include "vocoder.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <vector>

namespace {

torch::Tensor synthesize(Generator &gen, const torch::Tensor &mel, torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> pieces;
  for (const auto &chunk : mel.split(32, 2)) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): main()
    // calls prepare_for_synthesis() first; the guard above covers the loop.
    pieces.push_back(gen->forward(chunk.to(device)));
  }
  return torch::cat(pieces, 2);
}

}  // namespace

int main() {
  torch::manual_seed(3);
  const RuntimeInfo rt = probe_runtime();
  // OK(torch-cuda-unguarded): a CPU fallback on the other side.
  torch::Device device(rt.has_cuda ? torch::kCUDA : torch::kCPU);
  if (rt.has_cuda)
    warm_up_conv_kernels();

  Generator gen;
  gen->to(device);
  MelBatcher batcher(8, 48);
  train_vocoder(gen, batcher, device, 2000);

  prepare_for_synthesis(gen);
  auto mel = reference_mels(160);
  auto wave = synthesize(gen, mel, device);
  // BUG(torch-tensor-to-discarded): as_half() (audio.cpp) returns the
  // converted copy, which is dropped; the float waveform is written below.
  as_half(wave);

  {
    torch::NoGradGuard no_grad;
    auto frames = wave.squeeze(1).unfold(1, kFrame, kHop);
    auto spec = torch::fft::rfft(frames).abs();
    // BUG(torch-device-mismatch): mel_filterbank() (audio.cpp) builds the
    // filters on the host; the spectrum is on the generator's device.
    auto mel_again = torch::matmul(spec, mel_filterbank().t());
    std::cout << "mel round-trip energy " << mel_again.mean().item<double>() << '\n';
  }

  auto pcm = download_async(wave);
  // BUG(torch-non-blocking-d2h-race): download_async() (audio.cpp) only
  // queued the copy; the samples are read before any synchronisation.
  const float *samples = pcm.data_ptr<float>();
  float peak = 0;
  for (int64_t i = 0; i < pcm.numel(); ++i)
    peak = std::max(peak, std::abs(samples[i]));
  std::ofstream("reference.raw", std::ios::binary)
      .write(reinterpret_cast<const char *>(samples), static_cast<std::streamsize>(pcm.numel() * sizeof(float)));
  std::cout << "peak " << peak << '\n';

  finetune_on_speaker(gen, batcher, device, 300);
  return 0;
}
