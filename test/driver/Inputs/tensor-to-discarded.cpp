// A self-contained stand-in for at::Tensor, enough for the check's matcher.
namespace at {
class Tensor {
public:
  Tensor cuda() const;
  Tensor cpu() const;
};
} // namespace at

void to_gpu(at::Tensor x) {
  x.cuda();
}
