// A compiler warning with a fix-it (-Wextra-semi removes the ';'), used to
// test --fix and --export-fixes until a torch check has a fix-it.
struct Model {
  void forward() {};
};
