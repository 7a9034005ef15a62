// The project's own features.h shadows glibc's: every libc header fails, and
// std::shared_ptr is an invalid class. Building the CFG of a destructor that
// destroys one would crash clang; the analysis skips such functions, and
// still analyses the others.
#include <memory>
#include <torch/torch.h>
struct Holder {
  std::shared_ptr<int> data;
  ~Holder() {}
};
void f(torch::Tensor x) {
  Holder h;
  x.cuda();
}
void g(torch::Tensor x) {
  x.cuda();
}
