// A program that throws c10::Error look-alikes and knows nothing about the
// recorder: the preloaded libtorch_tidy_rt.so must see the throws through
// its __cxa_throw interposer, with no CUDA in the process.
//
//   tt_throw_prog          throw and catch; exit 0
//   tt_throw_prog crash    then throw uncaught (std::terminate -> SIGABRT)
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

namespace c10 {
class Error : public std::exception {
public:
  explicit Error(std::string msg) : msg_(std::move(msg)) {}
  const char *what() const noexcept override { return msg_.c_str(); }

private:
  std::string msg_;
};
} // namespace c10

__attribute__((noinline)) void forward(bool onCpu) {
  if (onCpu)
    throw c10::Error("Expected all tensors to be on the same device, but found at "
                     "least two devices, cuda:0 and cpu!");
}

int main(int argc, char **argv) {
  try {
    forward(true);  // MARK:caught
  } catch (const std::exception &e) {
    std::printf("caught: %s\n", e.what());
  }
  try {
    throw std::runtime_error("not a c10 error");  // MARK:other
  } catch (const std::exception &) {
  }
  if (argc > 1)
    forward(true);  // MARK:uncaught
  return 0;
}
